"""Recorded workflow histories (tests/histories/) still replay against the current workflow code.

A change that makes old histories non-deterministic breaks running jobs on
upgrade; this catches it without a server. Re-record with:
IRIS_RECORD_HISTORIES=tests/histories/vN python -m pytest tests/e2e/test_replay.py
(slices and the autoscaler: IRIS_RECORD_HISTORIES=tests/histories/fleet-vN ... tests/e2e/test_fleet.py;
jobs that continue as new: IRIS_RECORD_HISTORIES=tests/histories/handover-vN ... tests/e2e/test_job_continue_as_new.py;
a gang retried across runs: IRIS_RECORD_HISTORIES=tests/histories/gang-vN ... tests/faults/test_component_faults.py)
gang-v1 was recorded by the release before handovers, whose gang runs start with two arguments.
v9, handover-v3 and gang-v3 are jobs whose request carries code_version 1 (no patch markers).
v10: jobs of code_version 2 (enqueued in the workflow task that starts their tasks) and liveness
monitors of one agent session each, one of them a refused duplicate's (recorded by
tests/faults/test_misuse.py through `replay_run`).
v11: jobs of code_version 3 (only a small first batch enqueued with its start), a scheduler whose
announcements hand assignments to tasks not started yet back as late and deliver them in a
background activity (patch `late-assignments-apart`), and liveness monitors whose session runs on
the agent process's own queue.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from workflows.registry import ALL_WORKFLOWS

# One folder per recorded version of the workflow code: v1 is the first release, later folders
# are re-recorded after workflow changes. Every version must keep replaying.
HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))


def test_recorded_histories_exist() -> None:
    """Every workflow type has at least one recorded history to replay.

    `vN` folders hold the job path's workflows; `fleet-vN` folders the slice and autoscaler
    workflows (recorded by tests/e2e/test_fleet.py, which runs its own fleet cluster);
    `handover-vN` the runs of jobs that continued as new (tests/e2e/test_job_continue_as_new.py);
    `gang-vN` the runs of a gang that continued as new between attempts.
    """
    for version in {p.parent for p in HISTORIES}:
        types = {p.name.split("-", 1)[0] for p in version.glob("*.json")}
        core = {"SliceWorkflow", "AutoscalerWorkflow"} if version.name.startswith("fleet-") else {
            "JobWorkflow", "TaskWorkflow", "SchedulerWorkflow", "WorkerWorkflow"}  # fmt: skip
        if version.name.startswith("handover-"):
            core = {"JobWorkflow", "TaskWorkflow"}
        if version.name.startswith("gang-"):
            core = {"JobWorkflow"}
        assert core <= types, version
    assert {w.__name__ for w in ALL_WORKFLOWS} <= {p.name.split("-", 1)[0] for p in HISTORIES}


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    """The recorded history replays without a non-determinism error."""
    recorded = json.loads(path.read_text())  # noqa: ASYNC240 - a small fixture file
    history = WorkflowHistory.from_json(recorded["workflow_id"], json.dumps(recorded["history"]))
    await Replayer(workflows=ALL_WORKFLOWS).replay_workflow(history)
