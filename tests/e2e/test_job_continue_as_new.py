"""A plain job that may outgrow one history continues as new with its tasks still running.

The server suggests continue-as-new every 60 history events here, so a 30-task job hands itself
over many times: tasks started by one run end in a later one, retries are counted across runs,
every run replays, and killing a job kills the tasks an earlier run started. With
IRIS_RECORD_HISTORIES=DIR set, the runs' histories (and a task's) are saved there as replay
fixtures for tests/test_replay_recorded.py.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

import psutil
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory

from iris import IrisClient, Job, JobState, ResourceSpec, TaskStatus
from iris.config.cluster_file import parse_config
from tests.support import Cluster, memo_not_carried, replay_run, running_cluster, wait_until
from workflows.jobs.job_waves import HANDOVER_ATTEMPTS

FLEET = {
    "local": {
        "worker_groups": [
            {"name": "cpu", "count": 2, "resources": {"cpu": 4, "memory": "4g"}, "attributes": {"pool": "cpu"}},
        ]
    }
}
REPLICAS = 30
SUGGEST_CONTINUE_AS_NEW = "limit.historyCount.suggestContinueAsNew"
RETRIES = HANDOVER_ATTEMPTS  # a failure budget large enough that the job may outgrow one history


@pytest.fixture(scope="module")
def small_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = parse_config(FLEET, "test fleet")
    with running_cluster(tmp_path_factory.mktemp("iris-job-can"), config, {SUGGEST_CONTINUE_AS_NEW: "60"}) as c:
        yield c


@pytest.fixture(scope="module")
def client(small_history: Cluster) -> Iterator[IrisClient]:
    with IrisClient.connect(small_history.info.address, store=small_history.info.store_url) as c:
        yield c


async def _runs(address: str, job_id: str, record: str = "") -> list[tuple[WorkflowExecutionStatus | None, int]]:
    """Status and history length of every run of the job, oldest first, after replaying each.

    With `record` (a name) and IRIS_RECORD_HISTORIES set, also saves each run and task 0's history.
    """
    client = await Client.connect(address)
    runs = []
    started = {}
    async for wf in client.list_workflows(f"WorkflowId='{job_id}' OR WorkflowId='{job_id}/task-0'"):
        history = await replay_run(client, wf, record)
        if wf.id == job_id:
            runs.append((wf.start_time, wf.status, len(history.events)))
            started[wf.run_id] = wf.start_time
            _HISTORIES.setdefault(job_id, {})[wf.run_id] = history
            _EVENT_KINDS[wf.run_id] = Counter(EventType.Name(e.event_type) for e in history.events).most_common(8)
    by_start = dict(sorted(_HISTORIES.get(job_id, {}).items(), key=lambda item: started.get(item[0]) or 0))
    _HISTORIES[job_id] = by_start
    return [(status, n) for _, status, n in sorted(runs, key=lambda r: r[0])]


async def _listed(address: str, job_id: str) -> list[WorkflowExecutionStatus | None]:
    """Status of every run of the job as visibility lists them, oldest first, without fetching a history.

    What a test polls on: `_runs` replays every run each time it is called, which a poll would pay for
    at every turn; the test replays them all once (with `_runs`) after the wait.
    """
    client = await Client.connect(address)
    runs = [(wf.start_time, wf.status) async for wf in client.list_workflows(f"WorkflowId='{job_id}'")]
    return [status for _, status in sorted(runs, key=lambda r: r[0])]


_HISTORIES: dict[str, dict[str, WorkflowHistory]] = {}
"""Each job's runs' histories as `_runs` last read them, by run id, oldest first."""
_EVENT_KINDS: dict[str, list[tuple[str, int]]] = {}
"""The commonest event types of each run `_runs` read: what a run that grew too long was made of."""


def _of_job(process: psutil.Process, job_id: str) -> bool:
    """Whether `process` is a task process of job `job_id` (the agent puts IRIS_JOB_ID in a task's environment)."""
    try:
        return process.environ().get("IRIS_JOB_ID") == job_id
    except psutil.Error:  # gone meanwhile, or not ours to read
        return False


def _flaky(marks: Path) -> list[str]:
    """Every third task fails its first attempt; every task runs a second so runs overlap tasks."""
    code = (
        "import os, pathlib, sys, time; i = int(os.environ['IRIS_TASK_INDEX']); time.sleep(1); "
        f"mark = pathlib.Path({str(marks)!r}) / str(i); "
        "first = not mark.exists(); mark.touch(); sys.exit(1 if first and i % 3 == 0 else 0)"
    )
    return [sys.executable, "-c", code]


def test_job_hands_over_running_tasks_to_its_next_runs(
    client: IrisClient, small_history: Cluster, tmp_path: Path
) -> None:
    resources = ResourceSpec(cpu=0.1, memory="16m", replicas=REPLICAS)
    job = client.submit_command(_flaky(tmp_path), name="handover", resources=resources, max_retries_failure=RETRIES)
    status = job.wait(timeout=300)
    assert JobState.SUCCEEDED == status.state
    assert {"SUCCEEDED": REPLICAS} == status.task_state_counts
    assert [1 if t.task_index % 3 == 0 else 0 for t in status.tasks] == [t.failure_count for t in status.tasks]
    assert [f"{job.job_id}/task-{i}" for i in range(REPLICAS)] == [t.task_id for t in status.tasks]
    # Listed completed, not only "not running": a listing that does not show the last run yet ends in a handover.
    wait_until(lambda: asyncio.run(_listed(small_history.info.address, job.job_id))[-1]
               == WorkflowExecutionStatus.COMPLETED, timeout=30, what="the last run listed completed")  # fmt: skip
    runs = asyncio.run(_runs(small_history.info.address, job.job_id, record="handover"))
    assert len(runs) > 2, runs  # it continued as new, more than once
    assert all(s == WorkflowExecutionStatus.CONTINUED_AS_NEW for s, _ in runs[:-1]), runs
    assert WorkflowExecutionStatus.COMPLETED == runs[-1][0]
    assert all(n < 300 for _, n in runs), (runs, _EVENT_KINDS)  # no run holds the whole job
    histories = list(_HISTORIES[job.job_id].values())
    # Each run starts with the memo the last one published (its state and counts), not the one it started with.
    assert [] == [key for earlier, later in pairwise(histories) for key in memo_not_carried(earlier, later)]
    listed = wait_until(lambda: [j for j in client.list_jobs(state="SUCCEEDED") if j.job_id == job.job_id],
                        timeout=10, what="the job listed from visibility")  # fmt: skip
    assert {"SUCCEEDED": REPLICAS} == listed[0].task_state_counts
    assert 1 == sum(j.job_id == job.job_id for j in client.list_jobs())  # once, not once per run


def test_killing_a_handed_over_job_kills_the_tasks_earlier_runs_started(
    client: IrisClient, small_history: Cluster
) -> None:
    """A task an earlier run started and that is terminated from outside is recorded KILLED within
    the job's check (no signal comes from it); killing the job then kills the other 19."""
    resources = ResourceSpec(cpu=0.1, memory="16m", replicas=20)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    job = client.submit_command(sleeper, name="handover-kill", resources=resources, max_retries_failure=RETRIES)
    address = small_history.info.address

    def handed_over_while_running() -> bool:
        st = job.status()
        return st.task_state_counts.get("RUNNING") == 20 and len(asyncio.run(_listed(address, job.job_id))) > 1

    def task_processes() -> list[psutil.Process]:
        # This job's, by its id in their environment: the machine may run other clusters' tasks of this command.
        return [p for p in psutil.process_iter(["cmdline"]) if sleeper == p.info["cmdline"] and _of_job(p, job.job_id)]

    wait_until(handed_over_while_running, timeout=120, interval=0.5, what="all 20 running, in a later run")
    try:
        _killed_by_the_job(client, job, address, task_processes)
    finally:  # a failure above must not leave 20 tasks holding their places for the next test of this cluster
        job.terminate()


def _killed_by_the_job(
    client: IrisClient, job: Job, address: str, task_processes: Callable[[], list[psutil.Process]]
) -> None:
    """Terminate task 3 from outside, see the job record it, kill the job and see every place and process freed."""
    # RUNNING is reported once the attempt started: a task's process may take a moment more to become the command
    # (CI run 83 counted 19 of 20 at once under load).
    wait_until(lambda: len(task_processes()) == 20 or None, timeout=30, interval=0.2, what="20 task processes")

    async def terminate_task(index: int) -> None:  # as Terminate in the UI does: the task reports nothing
        temporal = await Client.connect(address)
        await temporal.get_workflow_handle(f"{job.job_id}/task-{index}").terminate("test: terminated from outside")

    def task_3_killed() -> TaskStatus | None:
        task = job.status().tasks[3]
        return task if task.state == "KILLED" else None

    asyncio.run(terminate_task(3))  # started by an earlier run: no child of the current one
    lost = wait_until(task_3_killed, timeout=150, interval=0.5, what="the terminated task recorded by the job")
    assert "terminated" in lost.error
    assert 19 == job.status().task_state_counts.get("RUNNING")
    assert job.terminate()
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.KILLED == status.state
    assert {"KILLED": 20} == status.task_state_counts

    async def task_runs_open() -> list[str]:
        temporal = await Client.connect(address)
        query = f"WorkflowId STARTS_WITH '{job.job_id}/' AND ExecutionStatus='Running'"
        return [wf.id async for wf in temporal.list_workflows(query)]

    wait_until(lambda: not asyncio.run(task_runs_open()), timeout=30, what="every task workflow closed")
    asyncio.run(_runs(address, job.job_id, record="killed"))
    wait_until(lambda: not any(w.running_tasks for w in client.list_workers()), timeout=30,
               what="no place left booked on a worker")  # fmt: skip
    wait_until(lambda: not task_processes(), timeout=30, what="no task process left, the terminated one's too")


def test_a_handed_over_job_that_fails_kills_the_tasks_earlier_runs_started(
    client: IrisClient, small_history: Cluster, tmp_path: Path
) -> None:
    """A task that fails for good in a later run fails the job (max_task_failures 0) and kills the 19
    tasks that earlier runs started, which are no children of the run that decides."""
    go = tmp_path / "fail-now"
    code = (
        "import os, pathlib, sys, time; i = int(os.environ['IRIS_TASK_INDEX'])\n"
        f"while i == 0 and not pathlib.Path({str(go)!r}).exists(): time.sleep(0.2)\n"
        "sys.exit(1) if i == 0 else time.sleep(600)"
    )
    resources = ResourceSpec(cpu=0.1, memory="16m", replicas=20)
    job = client.submit_command([sys.executable, "-c", code], name="handover-fail", resources=resources,
                                max_retries_preemption=RETRIES)  # fmt: skip
    address = small_history.info.address

    def handed_over_while_running() -> bool:
        st = job.status()
        return st.task_state_counts.get("RUNNING") == 20 and len(asyncio.run(_listed(address, job.job_id))) > 1

    wait_until(handed_over_while_running, timeout=120, interval=0.5, what="all 20 running, in a later run")
    go.touch()
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert {"FAILED": 1, "KILLED": 19} == status.task_state_counts
    assert "task 0 failed" in status.error
    # The job's state is published before its last run closes: wait for visibility to list it closed.
    wait_until(lambda: asyncio.run(_listed(address, job.job_id))[-1] != WorkflowExecutionStatus.RUNNING,
               timeout=30, what="the last run closed")  # fmt: skip
    runs = asyncio.run(_runs(address, job.job_id))
    assert WorkflowExecutionStatus.FAILED == runs[-1][0] and len(runs) > 1, runs
    wait_until(lambda: not any(w.running_tasks for w in client.list_workers()), timeout=30,
               what="no place left booked on a worker")  # fmt: skip
