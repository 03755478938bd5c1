"""Leases fence every attempt: an agent frozen (SIGSTOP) or cut off from Temporal while its tasks run on never
lets two attempts of a task overlap, for single tasks and for gangs (docs/reliability.md, "Leases").

Each task appends `task attempt worker what time` records, fsynced, to a file outside the store while it
runs; the attempts' spans, read back, must not overlap, and every task must end exactly once.

The tests share one cluster (started once: a cluster each cost 4-8 s a test on a loaded machine). Each test has
workers of its own, told apart by a `pool` attribute its jobs are constrained to, and a directory of its own for
its records, so no test's fault (a frozen or cut-off agent) reaches another's workers or records; the healthy
agent's long task runs from the module's start, beside the tests before it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from activities.contracts import RUN_TASK, task_workflow_id
from benchmarks.attempt_records import ends, first_worker, overlaps, spans
from benchmarks.partition import PartitionableAgent
from iris import Constraint, CoschedulingConfig, Job, JobState, ResourceSpec, TaskStatus
from iris.config.cluster_file import LocalWorkerSpec
from workflows.tasks.task_workflow import HEARTBEAT_TIMEOUT

from .conftest import FaultCluster, group, lines, module_cluster, wait_until

# Short, so the test is: the watchdog kills a frozen agent's task a lease after its last renewal, well before
# the server times the attempt out (HEARTBEAT, the agents' --heartbeat-timeout, which paces these tests: shorter
# than the default, so a frozen agent need not stay stopped as long); a frozen agent stays stopped past both, and
# a healthy task of 3 leases runs past both.
# (Each was a third longer: 4, 2 and 6 s.)
LEASE = 3.0
MARGIN = 1.5
HEARTBEAT = 4.5
FROZEN = 2 * LEASE  # how long the agent stays stopped
assert LEASE < HEARTBEAT < FROZEN < 3 * LEASE
assert HEARTBEAT < HEARTBEAT_TIMEOUT.total_seconds()  # the agents' own, not the default
ONE_CPU = ResourceSpec(cpu=1, memory="100m")
# Each test's workers: `pool` is the test's (its jobs are constrained to it).
FLEET = (
    group("victim", cpu=1, pool="frozen"), group("spare", cpu=2, pool="frozen"),
    group("a", cpu=1, count=2, slice="a", pool="gang"), group("b", cpu=1, count=2, slice="b", pool="gang"),
    group("cpu", cpu=1, pool="healthy"),  # its job starts with the module (`healthy_task`)
    group("haven", cpu=2, pool="cut"),  # beside the partitionable agent the test starts itself
)  # fmt: skip

RECORDER = """\
import os, sys, time
path, first_seconds = sys.argv[1], float(sys.argv[2])
task, attempt, worker = os.environ["IRIS_TASK_ID"], os.environ["IRIS_ATTEMPT"], os.environ["IRIS_WORKER_ID"]
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def record(what):
    os.write(fd, f"{task} {attempt} {worker} {what} {time.time():.3f}\\n".encode())
    os.fsync(fd)
record("start")
until = time.monotonic() + (first_seconds if attempt == "0" else 1.0)
while time.monotonic() < until:
    time.sleep(0.1)
    record("alive")
record("end")
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    """The module's cluster, with every test's workers. Its agents (and the one a test starts itself) hold short
    leases and declare a short heartbeat timeout: the daemons inherit IRIS_* settings."""
    agents = {"IRIS_LEASE_SECONDS": str(LEASE), "IRIS_LEASE_MARGIN_SECONDS": str(MARGIN),
              "IRIS_HEARTBEAT_TIMEOUT_SECONDS": str(HEARTBEAT)}  # fmt: skip
    with module_cluster(tmp_path_factory.mktemp("iris-fencing"), FLEET, agents) as fc:
        yield fc


@pytest.fixture(scope="module", autouse=True)
def healthy_task(shared: FaultCluster) -> Job:
    """The healthy-agent test's job, submitted as the module starts: it runs its 3 leases on a worker of its own
    while the tests before it fault theirs (nothing of it is theirs), so the test waits for its end, not the whole
    task."""
    return shared.client.submit_command(
        ["sleep", str(3 * LEASE)], resources=ONE_CPU, constraints=[Constraint("pool", "EQ", "healthy")]
    )


def _attempt_timeouts(c: FaultCluster, job_id: str) -> tuple[list[float], list[str]]:
    """From the task workflow's history: the heartbeat timeout each attempt was started with (seconds), and how
    each attempt that timed out did."""

    async def read() -> tuple[list[float], list[str]]:
        client = await Client.connect(c.info.address)
        history = await client.get_workflow_handle(task_workflow_id(job_id, 0)).fetch_history()
        scheduled, timed_out = [], []
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == RUN_TASK:
                    scheduled.append(attrs.heartbeat_timeout.ToTimedelta().total_seconds())
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                info = event.activity_task_timed_out_event_attributes.failure.timeout_failure_info
                timed_out.append(TimeoutType.Name(info.timeout_type))
        return scheduled, timed_out

    return asyncio.run(read())


def _recorder(c: FaultCluster) -> tuple[list[str], Path]:
    script = c.work / "recorder.py"
    script.write_text(RECORDER)
    records = c.work / "records"
    return [sys.executable, str(script), str(records), "60"], records


def _freeze(c: FaultCluster, worker_id: str, seconds: float) -> float:
    """SIGSTOP `worker_id`'s agent (its task processes run on) for `seconds`; when it was stopped."""
    assert c.local.kill_process(worker_id, signal.SIGSTOP)
    return time.time()


def test_a_frozen_agents_task_dies_with_its_lease_before_it_runs_elsewhere(c: FaultCluster) -> None:
    """An agent SIGSTOPped for 2x the lease, past its heartbeat timeout (its task left running): the task is killed by
    the lease watchdog, runs again elsewhere only after, is recorded as a preemption saying the lease expired, and
    succeeds once. The server timed the attempt out after the agent's own heartbeat timeout, not the default."""
    argv, records = _recorder(c)
    job = c.client.submit_command(argv, resources=ONE_CPU, constraints=[Constraint("pool", "EQ", "frozen")])
    wait_until(lambda: len(lines(records)) >= 3, timeout=60, what="attempt 0 running")
    assert "victim-0" == first_worker(records, "task-0")  # best fit: the tighter worker takes it
    stopped_at = _freeze(c, "victim-0", FROZEN)

    def lease_expired() -> TaskStatus | None:
        task = c.status(job.job_id).tasks[0]
        return task if "lease expired" in task.error else None

    try:
        seen = wait_until(lease_expired, timeout=HEARTBEAT + LEASE + MARGIN + 20, interval=0.2, what="lease expiry")
        reported = time.time() - stopped_at
        assert (1, 0) == (seen.preemption_count, seen.failure_count)
        assert seen.error.startswith("lease expired: the worker stopped renewing it")
        time.sleep(max(0.0, stopped_at + FROZEN - time.time()))
    finally:
        c.local.kill_process("victim-0", signal.SIGCONT)
    final = job.wait(timeout=90)
    task_spans = next(iter(spans(records).values()))
    killed, restarted = task_spans["0"][1] - stopped_at, task_spans["1"][0] - stopped_at
    print(f"\nagent SIGSTOP -> attempt 0 killed {killed:.1f} s later (lease {LEASE:g} s); lease expiry "
          f"reported {reported:.1f} s later; attempt 1 started {restarted:.1f} s later")  # fmt: skip
    assert JobState.SUCCEEDED == final.state
    assert ("spare-0", 1) == (final.tasks[0].worker_id, final.tasks[0].attempt)
    assert killed < LEASE + 2.0  # killed by its lease while the agent was still frozen
    assert [] == overlaps(records)
    assert {f"{job.job_id}/task-0": 1} == ends(records)
    assert ([HEARTBEAT, HEARTBEAT], ["TIMEOUT_TYPE_HEARTBEAT"]) == _attempt_timeouts(c, job.job_id)


def test_a_gang_is_placed_again_only_once_every_members_lease_is_gone(c: FaultCluster) -> None:
    """A gang member's agent SIGSTOPped for 2x the lease, past its heartbeat timeout: the whole gang moves to the
    other slice, and no member of its second attempt starts before the last record of any member of the first."""
    argv, records = _recorder(c)
    job = c.client.submit_command(
        argv, resources=ResourceSpec(cpu=1, memory="100m", replicas=2), coscheduling=CoschedulingConfig("slice"),
        constraints=[Constraint("pool", "EQ", "gang")],
    )  # fmt: skip
    wait_until(lambda: len({line.split()[0] for line in lines(records)}) == 2, timeout=60, what="gang running")
    victim = first_worker(records, "task-0")
    stopped_at = _freeze(c, victim, FROZEN)
    try:
        wait_until(lambda: any(s.get("1") for s in spans(records).values()), timeout=HEARTBEAT + LEASE + MARGIN + 30,
                   interval=0.2, what="gang placed again")  # fmt: skip
        time.sleep(max(0.0, stopped_at + FROZEN - time.time()))
    finally:
        c.local.kill_process(victim, signal.SIGCONT)
    final = c.client.wait(job.job_id, timeout=90)
    gang_spans = spans(records)
    first_end = max(s["0"][1] for s in gang_spans.values())
    second_start = min(s["1"][0] for s in gang_spans.values())
    print(f"\ngang member's agent SIGSTOP -> first attempt gone {first_end - stopped_at:.1f} s later, "
          f"second started {second_start - stopped_at:.1f} s later")  # fmt: skip
    assert JobState.SUCCEEDED == final.state
    assert first_end < second_start  # the surviving member is killed by its agent when the gang breaks
    frozen_end = max(s["0"][1] for task, s in gang_spans.items() if task.endswith("task-0"))
    assert frozen_end - stopped_at < LEASE + 2.0  # the frozen member by its lease
    assert [] == overlaps(records)
    assert {f"{job.job_id}/task-0": 1, f"{job.job_id}/task-1": 1} == ends(records)


def test_a_task_on_a_healthy_agent_outlives_many_leases_and_runs_once(healthy_task: Job) -> None:
    """A task running 3x the lease (and past the heartbeat timeout) on a healthy agent is renewed all along:
    it runs once, uninterrupted."""
    status = healthy_task.wait(timeout=120, raise_on_failure=False)
    assert (JobState.SUCCEEDED, 0, 0) == (status.state, status.tasks[0].attempt, status.tasks[0].preemption_count)


def test_a_partitioned_agents_task_dies_with_its_lease_before_it_runs_elsewhere(c: FaultCluster) -> None:
    """An agent cut off from Temporal for 2x the lease, past its heartbeat timeout (its link carries nothing either
    way; the agent itself runs on and its task with it): the task dies with its lease, runs again elsewhere only
    after, is recorded as a preemption saying the lease expired, and succeeds once; the agent outlives the
    partition."""
    spec = LocalWorkerSpec(worker_id="cut-0", cpu_millis=1000, memory_bytes=1 << 30, attributes={"pool": "cut"})
    agent = PartitionableAgent(c.local.home, spec, c.info.address, c.info.store_url)
    try:
        wait_until(lambda: c.healthy("cut-0"), timeout=60, what="the partitionable agent registered")
        argv, records = _recorder(c)
        job = c.client.submit_command(argv, resources=ONE_CPU, constraints=[Constraint("pool", "EQ", "cut")])
        wait_until(lambda: len(lines(records)) >= 3, timeout=60, what="attempt 0 running")
        assert "cut-0" == first_worker(records, "task-0")  # best fit: the tighter worker takes it
        agent.link.cut()
        cut_at = time.time()
        seen = wait_until(lambda: (t if "lease expired" in (t := c.status(job.job_id).tasks[0]).error else None),
                          timeout=HEARTBEAT + LEASE + MARGIN + 20, interval=0.2, what="lease expiry")  # fmt: skip
        assert seen.error.startswith("lease expired: the worker stopped renewing it")
        time.sleep(max(0.0, cut_at + FROZEN - time.time()))  # cut for 2x the lease in all
        assert agent.process.poll() is None  # running all along: only its link was gone
        agent.link.heal()
        final = job.wait(timeout=90)
    finally:
        agent.stop()
    task_spans = next(iter(spans(records).values()))
    killed, restarted = task_spans["0"][1] - cut_at, task_spans["1"][0] - cut_at
    print(f"\nagent cut off -> attempt 0 killed {killed:.1f} s later (lease {LEASE:g} s); "
          f"attempt 1 started {restarted:.1f} s later")  # fmt: skip
    assert JobState.SUCCEEDED == final.state
    assert ("haven-0", 1) == (final.tasks[0].worker_id, final.tasks[0].attempt)
    assert (1, 0) == (final.tasks[0].preemption_count, final.tasks[0].failure_count)
    assert killed < LEASE + 2.0  # by its lease, while the agent was cut off
    assert [] == overlaps(records)
    assert {f"{job.job_id}/task-0": 1} == ends(records)
    assert ([HEARTBEAT, HEARTBEAT], ["TIMEOUT_TYPE_HEARTBEAT"]) == _attempt_timeouts(c, job.job_id)
