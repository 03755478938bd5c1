"""A job tree's cleanup survives its controller: SIGKILLed before and during the sweep, nothing is left running."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from activities.contracts import RUN_TASK, task_workflow_id
from iris import IrisClient, JobState, ResourceSpec

from .conftest import FaultCluster, MakeCluster, group, wait_until

SMALL = ResourceSpec(cpu=0.25, memory="100m")
CHILDREN = 3
# The agent's lease (10 s by default): a killed child's kill reaches the agent with its next renewal, every
# lease / 3, so within 1 s, not 3 s.
LEASE = 3.0
# The controllers' sticky timeout (3 s with kills_controller alone): after each kill, the parent's and the children's
# workflows wait this long for the dead controller that ran them last before a live one runs them.
STICKY = 1.0


def _child(work: str, tag: str) -> None:
    Path(work, f"{tag}.tmp").write_text(str(os.getpid()))
    Path(work, f"{tag}.tmp").rename(Path(work, tag))  # whole when it appears: the test reads it as soon as it exists
    time.sleep(600)


def _parent(work: str) -> str:
    """Starts CHILDREN children, then returns once the test says so."""
    with IrisClient.connect() as client:
        for i in range(CHILDREN):
            client.submit(_child, work, f"child-{i}", name=f"child-{i}", resources=SMALL)
    while not Path(work, "go").exists():
        time.sleep(0.1)
    return "done"


def _attempt_reported(c: FaultCluster, task_id: str) -> bool:
    """Whether the task's history records its attempt's end (run_task completed: the agent has reported it)."""

    async def look() -> bool:
        handle = c.client._async.temporal.get_workflow_handle(task_id)
        runs: set[int] = set()
        async for event in handle.fetch_history_events():
            if event.activity_task_scheduled_event_attributes.activity_type.name == RUN_TASK:
                runs.add(event.event_id)
            if event.activity_task_completed_event_attributes.scheduled_event_id in runs:
                return True
        return False

    return c.client._run(look())


def _sweep_scheduled(c: FaultCluster, job_id: str) -> bool:
    """Whether the job's history shows its descendants' sweep (the kill_descendants activity) scheduled."""

    async def look() -> bool:
        handle = c.client._async.temporal.get_workflow_handle(job_id)
        async for event in handle.fetch_history_events():
            if event.activity_task_scheduled_event_attributes.activity_type.name == "kill_descendants":
                return True
        return False

    return c.client._run(look())


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_sigkilled_controller_during_the_cleanup_leaves_no_descendant_running(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller is SIGKILLed as the parent ends and again as its sweep is scheduled: once a controller
    is back, every child is killed (its process gone, KILLED naming the parent) and the parent SUCCEEDED."""
    monkeypatch.setenv("IRIS_LEASE_SECONDS", str(LEASE))  # the agent inherits IRIS_*
    c: FaultCluster = make_cluster(group("cpu", cpu=2), kills_controller=True, sticky_timeout=STICKY)
    work = c.work
    job = c.client.submit(_parent, str(work), name="parent", resources=SMALL)
    tags = [f"child-{i}" for i in range(CHILDREN)]
    wait_until(lambda: all((work / t).exists() for t in tags), timeout=120, what="the children running")
    pids = [int((work / t).read_text()) for t in tags]

    assert c.local.kill_process("controller", signal.SIGKILL, wait=5)
    (work / "go").write_text("")  # the parent's task ends while no controller runs
    wait_until(lambda: _attempt_reported(c, task_workflow_id(job.job_id, 0)), timeout=60, interval=0.1,
               what="the parent's attempt reported ended to Temporal")  # fmt: skip
    assert not any(_gone(p) for p in pids)  # its end is recorded, yet nothing kills them without a controller
    c.local.restart_process("controller")
    wait_until(lambda: _sweep_scheduled(c, job.job_id), timeout=60, interval=0.05, what="the sweep scheduled")
    assert c.local.kill_process("controller", signal.SIGKILL, wait=5)
    c.local.restart_process("controller")

    wait_until(lambda: all(_gone(p) for p in pids), timeout=90, what="every child's process gone")
    assert JobState.SUCCEEDED == c.client.wait(job.job_id, timeout=60).state
    children = c.client.list_jobs(parent=job.job_id)
    assert CHILDREN == len(children)
    for child in children:
        status = c.client.wait(child.job_id, timeout=60, raise_on_failure=False)
        assert JobState.KILLED == status.state
        assert job.job_id in status.error
