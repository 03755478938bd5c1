"""The worked pipeline of docs/pipelines.md, run as written there, on a schedule firing every few seconds."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

from iris import IrisClient, JobState
from tests.e2e.test_job_control import most_at_once
from tests.support import wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipelines.md"


def pipeline_module() -> types.ModuleType:
    """The `# pipeline.py` block of the docs page, as a module (its functions are shipped by value)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if b.startswith("# pipeline.py"))
    module = types.ModuleType("pipeline_doc")
    exec(compile(block, str(DOC), "exec"), module.__dict__)  # the documented code, run as written
    return module


def test_the_documented_nightly_pipeline_runs_on_its_schedule(client: IrisClient, tmp_path: Path) -> None:
    """The schedule's first night runs prep, then the sweep never more than 2 at a time, then eval, which finds
    the best learning rate; each step starts after the one before ended."""
    pipeline = pipeline_module()
    sched = pipeline.schedule_nightly(client, str(tmp_path), cron="*/4 * * * * * *")
    try:
        wait_until(lambda: len(sched.jobs()) >= 1, timeout=60, what="the first night")
        night = sched.jobs()[0]
        sched.pause()
        status = night.wait(timeout=300)
        assert JobState.SUCCEEDED == status.state
        children = {j.name: j for j in client.list_jobs(parent=night.job_id)}
        assert ["eval", "prep", "sweep"] == sorted(children)
        sweep = client.job_status(children["sweep"].job_id)
        assert (2, (children["prep"].job_id,)) == (sweep.max_concurrent, sweep.after)
        out = tmp_path / night.job_id
        runs = [json.loads((out / f"train-{i}.json").read_text()) for i in range(4)]
        assert 2 == most_at_once([(start, end) for start, end, _ in runs])
        losses = [loss for _, _, loss in runs]
        best = pipeline.LEARNING_RATES[losses.index(min(losses))]
        assert {"learning_rate": best, "loss": min(losses)} == night.results()[0]
        prep_end = client.job_status(children["prep"].job_id).finished_at
        eval_status = client.job_status(children["eval"].job_id)
        assert prep_end is not None and prep_end <= min(start for start, _, _ in runs)
        assert eval_status.submitted_at < max(end for _, end, _ in runs)  # submitted early, it waited
    finally:
        sched.delete()
