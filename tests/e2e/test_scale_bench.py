"""`python -m benchmarks scale` end to end, tiny: synthetic agents, the real scheduler, a real dev server."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from activities.contracts import SCHEDULER_WORKFLOW_ID
from benchmarks.scale import SPAN_SLACK, SchedulerClosedError, _check_scheduler
from tests.support import workflows_on_dev_server
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow


def test_scale_bench_places_everything_and_reports(tmp_path: Path) -> None:
    """40 hosts in 4 agent sessions take 300 tasks; no limit is hit, a silent agent's hosts are lost, and every
    scheduler run replays on the current code.

    The server suggests continue-as-new every 25 events here, so the scheduler's state travels packed
    between runs several times while it works.
    """
    out = tmp_path / "scale.json"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "scale", "--workers", "40", "--pending", "300",
         "--hosts-per-agent", "10", "--timeout", "120", "--continue-as-new-events", "25", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert 0 == run.returncode, run.stdout + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert 300 == figures["placed"]
    assert [] == figures["limits_hit"]
    assert figures["passes"] >= 1
    assert figures["runs"] >= 2 and figures["continue_as_new_bytes"]  # the state was carried over, packed
    assert figures["lost_detect_seconds"] is not None  # the quiet agent's 10 hosts were reported lost
    assert "limits hit: none" in run.stdout
    assert figures["workflow_task_seconds"] and "longest workflow task" in run.stdout  # phase timing reported
    # Each long task is split into the scheduler's code (its activations, timed in the controller) and the wait
    # around it, which adds up to no more than the task's time in history.
    for ms, _, run_id, began, ended in figures["longest_workflow_tasks"]:
        spans = [s for s in figures["scheduler_activations"]["spans"] if s[0] == run_id and began - SPAN_SLACK <= s[1]]
        inside = [s for s in spans if s[2] <= ended + SPAN_SLACK]
        assert inside, (ms, run_id)
        assert sum(s[2] - s[1] for s in inside) * 1000 <= ms + 10
    assert run.stdout.count("(the scheduler's code ") == len(figures["longest_workflow_tasks"])
    assert figures["replayed_runs"] >= figures["runs"] - 1  # every scheduler run (the open one may have no task yet)
    assert [] == figures["replay_failures"]


def _command_lines(procs: list[psutil.Process]) -> list[str]:
    lines = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            lines.append(" ".join(proc.cmdline()))
    return lines


def test_a_terminated_scale_bench_stops_its_server_and_controller() -> None:
    """SIGTERM stops the bench as Ctrl-C does: the dev server and the controller it started go with it (they
    outlived a terminated bench)."""
    bench = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "scale", "--workers", "40", "--pending", "300", "--hosts-per-agent",
         "10", "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not any("scale_controller" in line for line in _command_lines(started)):
            assert bench.poll() is None and time.monotonic() < deadline, "the bench's controller did not start"
            time.sleep(0.1)
            started = psutil.Process(bench.pid).children(recursive=True)
        assert any("temporal" in line and "start-dev" in line for line in _command_lines(started))
        bench.send_signal(signal.SIGTERM)
        assert 130 == bench.wait(timeout=60)
        _, alive = psutil.wait_procs(started, timeout=30)
        assert [] == _command_lines(alive)
    finally:
        for proc in started:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if bench.poll() is None:
            bench.kill()
        bench.communicate(timeout=30)


async def test_the_bench_stops_waiting_once_the_scheduler_is_terminated() -> None:
    """A scheduler the server terminated (a limit hit) ends the bench's waits with what happened; they went on
    polling it until their deadline (30 minutes by default), and enqueues retried for five minutes a job."""
    async with workflows_on_dev_server("bench-closed", [SchedulerWorkflow], []) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, args=[None], id=SCHEDULER_WORKFLOW_ID,
                                             task_queue=queue)  # fmt: skip
        await _check_scheduler(client)  # running: nothing to say
        await handle.terminate("a limit, as the server would")
        with pytest.raises(SchedulerClosedError, match="the scheduler's workflow closed: TERMINATED"):
            await _check_scheduler(client)
