"""A job waiting for another (`after=`) keeps waiting through a dead controller and a dead Temporal server."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from iris import JobState, ResourceSpec

from .conftest import FaultCluster, MakeCluster, group, wait_until

SMALL = ResourceSpec(cpu=0.25, memory="64m")
FIRING_EVERY = 2  # seconds between the schedule's firings, at whole multiples on the clock (it was 5)


def wait_for_file(path: str) -> float:
    while not Path(path).exists():
        time.sleep(0.1)
    return time.time()


def started_at() -> float:
    return time.time()


def test_a_dependent_job_waits_through_controller_and_server_restarts(make_cluster: MakeCluster) -> None:
    """With the controller SIGKILLed and restarted, then the dev server SIGKILLed and restarted, while a job
    waits for another, it still waits (PENDING, naming the other), then runs once the other has succeeded."""
    c: FaultCluster = make_cluster(group("cpu", cpu=2), kills_controller=True)
    gate = c.work / "go"
    first = c.client.submit(wait_for_file, str(gate), resources=SMALL, name="prep")
    second = c.client.submit(started_at, resources=SMALL, name="eval", after=[first.job_id])
    wait_until(lambda: c.status(first.job_id).state == JobState.RUNNING, what="the dependency runs")
    reason = f"waiting for job {first.job_id} to succeed (after_rule=succeeded)"
    assert reason == c.status(second.job_id).pending_reason

    assert c.local.kill_process("controller", signal.SIGKILL, wait=5)
    # While it is dead, the job's status still names what it waits for (from the job's memo; it said that the
    # scheduler's reason was unknown): asked once the query has gone unanswered, seconds after the kill.
    assert f"{reason} (as last heard: no answer from the Iris controller now)" == c.status(second.job_id).pending_reason
    c.local.restart_process("controller")
    assert c.local.kill_process("temporal", signal.SIGKILL, wait=5)
    time.sleep(3.0)
    c.local.restart_process("temporal")
    wait_until(lambda: c.status(second.job_id).pending_reason == reason, timeout=120, what="the waiting job answers")
    assert {"PENDING": 1} == c.status(second.job_id).task_state_counts

    gate.touch()
    ended = first.wait(timeout=180).finished_at
    assert JobState.SUCCEEDED == second.wait(timeout=180).state
    assert ended is not None and second.results()[0] >= ended


def test_a_schedule_fires_through_controller_and_server_restarts(make_cluster: MakeCluster) -> None:
    """A firing due while the controller is dead starts its job, which runs once the controller is back; a
    firing due while the dev server is dead is caught up when it is back. Each job runs to its end."""
    c: FaultCluster = make_cluster(group("cpu", cpu=2), kills_controller=True)
    cron = f"*/{FIRING_EVERY} * * * * * *"
    sched = c.client.create_schedule("tick", started_at, cron=cron, overlap="allow_all", resources=SMALL)
    wait_until(lambda: len(sched.jobs()) >= 1, timeout=60, what="a first firing")

    assert c.local.kill_process("controller", signal.SIGKILL, wait=5)
    before = len(sched.jobs())
    wait_until(lambda: len(sched.jobs()) > before, timeout=30, what="a firing with no controller")
    waiting = sched.jobs()[-1]
    c.local.restart_process("controller")
    status = waiting.wait(timeout=180, raise_on_failure=False)
    assert JobState.SUCCEEDED == status.state, status

    assert c.local.kill_process("temporal", signal.SIGKILL, wait=5)
    down_at = time.time()
    due = (down_at // FIRING_EVERY + 1) * FIRING_EVERY  # the first firing after the kill, on the clock
    time.sleep(due + 1.0 - time.time())  # it falls while the server is away (this was a fixed 8 s)
    c.local.restart_process("temporal")
    sched.pause()

    def caught_up() -> bool:
        return any(c.client.job_status(j.job_id).submitted_at >= down_at for j in sched.jobs())

    wait_until(caught_up, timeout=120, what="the firing missed while the server was away")
    late = [j for j in sched.jobs() if c.client.job_status(j.job_id).submitted_at >= down_at]
    for job in late:
        status = job.wait(timeout=180, raise_on_failure=False)
        assert JobState.SUCCEEDED == status.state, status
    sched.delete()
