"""Bad input and misuse on one shared cluster: each must fail with a reason and leave the cluster serving.

The fleet is one `main` worker and one `gate` worker. A test that must change a
job's files before the job runs first fills `gate` with a blocker, submits the
job there (it waits), tampers, then kills the blocker.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from activities.contracts import WorkerSessionInput, worker_task_queue
from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_attr
from iris import Constraint, Job, JobState, ResourceSpec
from tests.support import replay_run
from worker_agent.leases.lease_settings import LeaseSettings
from worker_agent.registration import register_hosts
from worker_agent.storage import BlobStore, LogStore
from workflows.tasks.task_workflow import DISPATCH_TIMEOUT

from .conftest import FaultCluster, group, group_members, lines, start_cluster, stop_cluster, wait_until

SMALL = ResourceSpec(cpu=0.5, memory="100m")
DISPATCH = DISPATCH_TIMEOUT.total_seconds()
ON_GATE = {"resources": ResourceSpec(cpu=1, memory="100m"), "constraints": [Constraint("role", "EQ", "gate")]}
ON_MAIN = {"resources": SMALL, "constraints": [Constraint("role", "EQ", "main")]}
ON_FLEET = ("main-0", "gate-0")


# The agents' kill grace (--kill-grace; 5 s by default): what the SIGTERM-ignoring task waits out before its SIGKILL.
KILL_GRACE = 2.0
# The agents' lease (10 s by default): a kill reaches an agent with its next renewal, every lease / 3 (3 s by
# default), so the tests that kill a job (a blocker, the SIGTERM-ignoring task) wait a third of that, at most.
LEASE = 4.0


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("IRIS_KILL_GRACE_SECONDS", str(KILL_GRACE))  # the agents inherit IRIS_*
        env.setenv("IRIS_LEASE_SECONDS", str(LEASE))
        fc = start_cluster(
            tmp_path_factory.mktemp("iris-misuse"),
            [group("main", cpu=2, role="main"), group("gate", cpu=1, role="gate")],
        )
    try:
        yield fc
    finally:
        stop_cluster(fc)


def add(a: int, b: int) -> int:
    """Task body: the sum."""
    return a + b


def assert_cluster_serves(c: FaultCluster) -> None:
    """Both workers are healthy with their original capacity, and each still runs a job."""
    workers = c.workers()
    assert {"main-0": (True, 2.0), "gate-0": (True, 1.0)} == {w: (workers[w].healthy, workers[w].cpu) for w in ON_FLEET}
    job = c.client.submit(add, 2, 3, **ON_MAIN)
    job.wait(timeout=60)
    assert [5] == job.results()
    gate = c.client.submit(add, 1, 1, **ON_GATE)
    gate.wait(timeout=60)
    assert [2] == gate.results()


def serve_worker(c: FaultCluster, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `iris worker serve` against the cluster (as if on another host when `home` is given)."""
    env = c.env if home is None else {**c.env, "IRIS_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "iris", "worker", "serve", "--memory", "1g", "--task-user", "", *args],
        env=env, capture_output=True, text=True, timeout=90,
    )
    done.stderr = " ".join(done.stderr.split())  # the CLI wraps its messages at the terminal width
    return done


async def _register_raw(address: str, meta: pb.WorkerMetadata) -> str:
    """Register `meta` as an agent's code does (its monitor, the signal, the answer) but without the CLI's
    checks; the refusal message, or "accepted"."""
    client = await Client.connect(address)
    session = WorkerSessionInput(worker_id=meta.worker_id, session=meta.agent_session, announced=True)
    refused = await register_hosts(client, session, [meta], timeout=60)
    return (refused or {}).get(meta.worker_id, "accepted")


async def _monitors(address: str, worker_id: str) -> set[tuple[str, str]]:
    """The running liveness monitors (WorkerWorkflows) of `worker_id`: (workflow id, run id)."""
    client = await Client.connect(address)
    query = (
        "WorkflowType = 'WorkerWorkflow' AND ExecutionStatus = 'Running'"
        f" AND WorkflowId STARTS_WITH 'iris-worker-{worker_id}-'"
    )
    return {(wf.id, wf.run_id) async for wf in client.list_workflows(query)}


async def _task_pollers(address: str, worker_id: str) -> set[str]:
    """Who polled `worker_id`'s task queue in the last minutes (the server remembers each poller a while)."""
    client = await Client.connect(address)
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=worker_task_queue(worker_id)),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    return {p.identity for p in described.pollers}


async def _replay_closed_monitors(address: str, worker_id: str) -> int:
    """Replay (and, when recording, save) the closed monitors of `worker_id`; how many there were."""
    client = await Client.connect(address)
    query = (
        "WorkflowType = 'WorkerWorkflow' AND ExecutionStatus != 'Running'"
        f" AND WorkflowId STARTS_WITH 'iris-worker-{worker_id}-'"
    )
    closed = [wf async for wf in client.list_workflows(query)]
    for wf in closed:
        await replay_run(client, wf, record="refused")
    return len(closed)


def raw_meta(
    worker_id: str, cpu_millis: int = 1000, runtime: str = "process", taint: str = ""
) -> pb.WorkerMetadata:
    """Worker metadata as an agent would send it, for registrations that bypass the agent."""
    meta = pb.WorkerMetadata(worker_id=worker_id, runtime=runtime, host="elsewhere", agent_session="raw")
    meta.capacity.cpu_millis = cpu_millis
    meta.capacity.memory_bytes = 2**30
    if taint:
        set_attr(meta.attributes[f"taint:{taint}"], True)
    return meta


def test_malformed_worker_registrations_are_refused_with_a_reason(shared: FaultCluster, tmp_path: Path) -> None:
    """Negative capacity, an unknown runtime and a clashing duplicate id are refused with a reason;
    the scheduler, the original worker and its running task carry on."""
    c = shared
    serving = asyncio.run(_monitors(c.info.address, "main-0"))
    assert 1 == len(serving), serving
    neg = serve_worker(c, "--worker-id", "neg", "--cpu=-1")
    assert 0 != neg.returncode and "cpu" in neg.stderr, neg.stderr
    runtime = serve_worker(c, "--worker-id", "warp", "--cpu", "1", "--runtime", "warp")
    assert 0 != runtime.returncode and "runtime" in runtime.stderr, runtime.stderr

    other_host = serve_worker(c, "--worker-id", "main-0", "--cpu", "4", home=tmp_path / "other-host")
    assert 3 == other_host.returncode, other_host.stderr
    assert "already registered and healthy with different resources" in other_host.stderr
    # The refused agent left the serving agent's session alone (it once replaced its monitor, and
    # the two agents then took the id from each other).
    assert serving == asyncio.run(_monitors(c.info.address, "main-0"))
    # It never polled main-0's task queue, so it could not have taken one of the serving agent's tasks
    # while it waited for its answer (it once did, for its first tens of milliseconds).
    pollers = asyncio.run(_task_pollers(c.info.address, "main-0"))
    assert 1 == len(pollers) and all(p.startswith("main-0/agent-") for p in pollers), pollers
    # The refused agent's own monitor ended once it had read its answer, and its history replays.
    wait_until(lambda: asyncio.run(_replay_closed_monitors(c.info.address, "main-0")) > 0, what="refused monitor")

    gate = c.work / "refused"  # the task runs until the refused agent has exited (it was `sleep 3`)
    running = c.client.submit_command(["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"], **ON_MAIN)
    wait_until(lambda: running.status().state == JobState.RUNNING, what="task running on main-0")
    same_host = serve_worker(c, "--worker-id", "main-0", "--cpu", "4")
    assert 0 != same_host.returncode and "already serves this worker id" in same_host.stderr, same_host.stderr
    gate.touch()
    assert JobState.SUCCEEDED == running.wait(timeout=60).state  # the refused agent touched nothing

    refusals = {
        "negative capacity": asyncio.run(_register_raw(c.info.address, raw_meta("raw-neg", cpu_millis=-5))),
        "unknown runtime": asyncio.run(_register_raw(c.info.address, raw_meta("raw-rt", runtime="warp"))),
        "path in the id": asyncio.run(_register_raw(c.info.address, raw_meta("../main-0"))),
        "clashing duplicate": asyncio.run(_register_raw(c.info.address, raw_meta("main-0", cpu_millis=8000))),
    }
    assert all(m.startswith("registration refused: ") for m in refusals.values()), refusals
    assert "negative" in refusals["negative capacity"]
    assert "runtime 'warp'" in refusals["unknown runtime"]
    assert_cluster_serves(c)


def _function_key(job: Job) -> str:
    return f"jobs/{job.job_id}/function"


def _garbage(c: FaultCluster, job: Job) -> None:
    BlobStore.from_url(c.info.store_url).put(_function_key(job), b"\x80\x05this is no pickle")


def _missing(c: FaultCluster, job: Job) -> None:
    BlobStore.from_url(c.info.store_url).delete(_function_key(job))


def _log_dir_is_a_file(c: FaultCluster, job: Job) -> None:
    job_logs = LogStore.from_url(c.info.store_url.rstrip("/") + "/logs").task_dir(job.job_id, 0).parent
    job_logs.parent.mkdir(parents=True, exist_ok=True)
    job_logs.write_text("a file where the job's log directory should be\n")  # root ignores chmod


@pytest.mark.parametrize(
    ("sabotage", "expected"),
    [
        (_garbage, "cannot unpickle the task's function"),
        (_missing, "task function blob is missing"),
        (_log_dir_is_a_file, "cannot open the task's log"),
    ],
    ids=["unpicklable-function", "missing-function-blob", "unwritable-log-dir"],
)
def test_broken_task_inputs_fail_the_task_with_a_reason_and_the_agent_carries_on(
    shared: FaultCluster, sabotage: Callable[[FaultCluster, Job], None], expected: str
) -> None:
    """A garbage or missing function blob, or an unusable log directory, fails the task with an error
    saying so, and the agent stays healthy and runs the next job."""
    c = shared
    blocker = c.client.submit_command(["sleep", "300"], **ON_GATE)
    wait_until(lambda: blocker.status().state == JobState.RUNNING, what="gate blocked")
    job = c.client.submit(add, 1, 2, **ON_GATE)
    wait_until(lambda: job.status().pending_reason, what="job waiting for the gate")
    sabotage(c, job)
    blocker.terminate()
    status = job.wait(timeout=60, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert expected in status.tasks[0].error, status.tasks[0].error
    assert JobState.KILLED == blocker.wait(timeout=30, raise_on_failure=False).state
    assert_cluster_serves(c)


def test_hostile_job_names_reach_no_shell_and_stay_inside_the_store(shared: FaultCluster) -> None:
    """Job names with shell metacharacters and `..` are kept as display names only: nothing is
    executed and every file the jobs wrote lies inside the store."""
    c = shared
    pwned = c.work / "pwned"
    name = f"../../etc; rm -rf / $(touch {pwned}) `touch {pwned}` | x && y/../.."
    command = c.client.submit_command(["echo", "hi"], name=name, **ON_MAIN)
    function = c.client.submit(add, 20, 22, name=name, **ON_MAIN)
    for job in (command, function):
        status = job.wait(timeout=60)
        assert (JobState.SUCCEEDED, name) == (status.state, status.name)
        assert re.fullmatch(r"[a-z0-9-]+", job.job_id), job.job_id
    assert ["hi"] == command.logs(0)
    assert [42] == function.results()
    assert not pwned.exists()
    root = c.store_root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [*dirnames, *filenames]:
            path = Path(dirpath, entry)
            assert path.resolve().is_relative_to(root), path
            assert ".." != entry and "/" not in entry
    home = c.local.home
    assert not (home / "etc").exists() and not (home.parent / "etc").exists()


def test_task_ignoring_sigterm_is_sigkilled_after_the_grace_period(shared: FaultCluster) -> None:
    """Killing a job whose task traps SIGTERM SIGKILLs its whole process group after the agent's kill grace."""
    c = shared
    pidfile = c.work / "stubborn.pid"
    script = f"trap '' TERM; echo $$ > {pidfile}; sleep 300 & sleep 300"
    job = c.client.submit_command(["sh", "-c", script], **ON_MAIN)
    pgid = int(wait_until(lambda: "".join(lines(pidfile)).strip(), what="task started"))
    wait_until(lambda: len(group_members(pgid)) >= 3, what="shell and both sleeps running")
    killed_at = time.monotonic()
    job.terminate()
    wait_until(lambda: not group_members(pgid), timeout=KILL_GRACE + 15, interval=0.05, what="group gone")
    elapsed = time.monotonic() - killed_at
    print(f"\njob kill -> SIGTERM-ignoring task group gone: {elapsed:.1f} s (grace {KILL_GRACE:g} s)")
    # The kill reaches the agent with its lease's next heartbeat (one interval at most), then the grace runs.
    assert KILL_GRACE - 0.5 <= elapsed <= KILL_GRACE + LeaseSettings(seconds=LEASE).interval + 4.0
    status = job.wait(timeout=30, raise_on_failure=False)
    assert JobState.KILLED == status.state
    assert [] == group_members(pgid)
    assert_cluster_serves(c)


def test_task_placed_on_a_registered_worker_that_never_polls_runs_elsewhere(shared: FaultCluster) -> None:
    """A worker whose agent died right after registering (no session, no poller) takes a task once:
    after the dispatch timeout the task runs on another worker."""
    c = shared
    # The tightest fit, so placed there first; the taint keeps the other tests' jobs away from it.
    assert "accepted" == asyncio.run(_register_raw(c.info.address, raw_meta("ghost", cpu_millis=500, taint="ghost")))
    job = c.client.submit_command(["true"], resources=SMALL, tolerations=["ghost"])
    try:
        wait_until(lambda: c.workers()["ghost"].running_tasks, what="placed on the ghost")
        try:
            status = job.wait(timeout=2 * DISPATCH + 8, raise_on_failure=False)
        except TimeoutError:
            status = job.status()
        task = status.tasks[0]
        assert JobState.SUCCEEDED == status.state, f"attempt {task.attempt}, on {c.workers()['ghost'].running_tasks}"
    finally:
        job.terminate()
