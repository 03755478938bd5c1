"""Kill or pause each component of a real local cluster and check that no work is lost or run twice.

Each test prints what it measured, e.g. how long it took to notice a SIGKILLed worker. The tests whose fault
leaves the cluster whole again share one cluster (a cluster each cost 4-6 s a test on a loaded machine): the
lost-worker tests fault only workers of their own, told apart by attributes their jobs are constrained to; the
controller tests (stopped, and restarted with its scheduler terminated) check that the cluster carries on once
the fault is over, and the dev server restart test, last, that every agent is healthy again. Each test runs its
jobs on workers of its own and has a directory of its own for what its tasks write. They come last in the file:
their cluster starts with the first of them and stays up to the module's end. The tests that SIGKILL the
controller or need a dev server set up for them start their own.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from iris import (
    Constraint,
    CoschedulingConfig,
    IrisClient,
    JobState,
    ResourceSpec,
    TaskState,
    TaskStatus,
    WorkerStatus,
    get_job_info,
)
from tests.ops.cli import iris
from tests.support import holds_throughout, replay_run
from worker_agent.leases.lease_settings import LeaseSettings
from workflows.scheduler.scheduler_carry import unpack
from workflows.scheduler.scheduler_state import SchedulerState
from workflows.tasks.fencing import fence_seconds
from workflows.tasks.task_workflow import DISPATCH_TIMEOUT, HEARTBEAT_TIMEOUT

from .conftest import (
    FaultCluster,
    MakeCluster,
    group,
    lines,
    module_cluster,
    pid_running,
    wait_until,
)

# The lost-worker tests' agents declare a 4.5 s heartbeat timeout (--heartbeat-timeout; the default is 10 s) and a
# 3 s lease (they were 6 s and 5 s): a lost attempt is given up 4.5 s after its last heartbeat, then waits 0.5 s more
# for its lease to run out (lease + margin - timeout, the default margin), a wait of its own as with the defaults
# (10 s, then 2 s).
HEARTBEAT = 4.5
LEASE = 3.0
LOST_WORKER_AGENTS = {"IRIS_HEARTBEAT_TIMEOUT_SECONDS": str(HEARTBEAT), "IRIS_LEASE_SECONDS": str(LEASE)}
# What a lost attempt waits beyond the heartbeat timeout for its lease to run out.
FENCE = fence_seconds([LeaseSettings(seconds=LEASE).detail()], HEARTBEAT) or 0.0
assert HEARTBEAT < HEARTBEAT_TIMEOUT.total_seconds() and FENCE > 0
DISPATCH = DISPATCH_TIMEOUT.total_seconds()
SLACK = 6.0  # a loaded 2-core machine: timers, workflow tasks and polls all add latency
ONE_CPU = ResourceSpec(cpu=1, memory="100m")
# The shared cluster's workers, each test's told apart by an attribute its jobs are constrained to.
FLEET = (
    group("victim", cpu=1, pool="f", role="victim"), group("spare", cpu=2, pool="f"),  # the SIGKILLed worker test's
    group("paused", cpu=8, zone="z", role="paused"), group("other", cpu=16, zone="z"),  # the paused worker test's
    group("cpu", cpu=1, pool="one"),  # the controller tests': one cpu, so a second job waits for the first
    group("pair", cpu=1, count=2, pool="two"),  # the dev server restart test's: two jobs run, a third waits
)  # fmt: skip
ON_ONE = [Constraint("pool", "EQ", "one")]
ON_TWO = [Constraint("pool", "EQ", "two")]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    """The module's cluster, with the sharing tests' workers. Its agents declare the lost-worker tests' heartbeat
    timeout and lease (LOST_WORKER_AGENTS)."""
    with module_cluster(tmp_path_factory.mktemp("iris-faults"), FLEET, LOST_WORKER_AGENTS) as fc:
        yield fc


def record_run_until(directory: str, gate: str) -> int:
    """Task body: append start and end (with attempt and time) to a shared file, running until `gate` exists
    in between (the test ends it when its outage is over), a line a tick to `ticks-INDEX` meanwhile (it is
    alive); return 10 * index."""
    info = get_job_info()
    assert info is not None
    path = Path(directory) / "runs"
    with path.open("a") as f:
        f.write(f"{info.task_index} {info.attempt} start {time.time()}\n")
    ticks = Path(directory) / f"ticks-{info.task_index}"
    while not Path(gate).exists():
        with ticks.open("a") as f:
            f.write(".\n")
        time.sleep(0.1)
    with path.open("a") as f:
        f.write(f"{info.task_index} {info.attempt} end {time.time()}\n")
    return info.task_index * 10


def read_runs(path: Path) -> dict[tuple[int, int], dict[str, float]]:
    """(task index, attempt) -> {"start": t, "end": t} from the lines `record_run_until` wrote."""
    runs: dict[tuple[int, int], dict[str, float]] = {}
    for line in path.read_text().splitlines():
        index, attempt, what, when = line.split()
        runs.setdefault((int(index), int(attempt)), {})[what] = float(when)
    return runs


def test_sigkilled_controller_restarts_and_the_job_finishes_once(make_cluster: MakeCluster) -> None:
    """With the controller SIGKILLed mid-job and restarted, a 3-task job succeeds with the right
    results and each task ran exactly once."""
    # Sticky timeout 1 s (3 s with kills_controller alone): after the kill, the tasks' and the scheduler's workflows
    # wait this long for the dead controller that ran them last before the restarted one runs them.
    c: FaultCluster = make_cluster(group("cpu", cpu=1, count=2), kills_controller=True, sticky_timeout=1.0)
    gate = c.work / "go"  # the tasks run until the controller is back (they ran 4 s each, the third after the two)
    job = c.client.submit(
        record_run_until, str(c.work), str(gate), resources=ResourceSpec(cpu=1, memory="100m", replicas=3)
    )
    runs = c.work / "runs"
    wait_until(lambda: len(lines(runs)) >= 2, what="two tasks started")
    assert c.local.kill_process("controller", signal.SIGKILL, wait=5)
    assert "controller" not in c.alive()
    started = sorted(int(line.split()[0]) for line in lines(runs))
    at_kill = {index: len(lines(c.work / f"ticks-{index}")) for index in started}
    # The two tasks keep running with no controller: each ticks on through a second of the outage.
    wait_until(lambda: all(len(lines(c.work / f"ticks-{i}")) >= n + 10 for i, n in at_kill.items()),
               what="both running tasks ticking while the controller is dead")  # fmt: skip
    assert 2 == len(lines(runs))  # both still running, the third not started: no controller placed it
    c.local.restart_process("controller")
    gate.touch()

    status = c.client.wait(job.job_id, timeout=90)
    assert JobState.SUCCEEDED == status.state
    assert [0, 10, 20] == job.results()
    runs_by_key = read_runs(runs)
    assert [(0, 0), (1, 0), (2, 0)] == sorted(runs_by_key)  # each task once, no retry
    assert all({"start", "end"} == set(r) for r in runs_by_key.values())  # every run finished
    for index in range(3):
        spans = sorted((r["start"], r["end"]) for (i, _), r in runs_by_key.items() if i == index)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    assert [0, 0, 0] == [t.preemption_count + t.failure_count for t in status.tasks]


async def _all_jobs(address: str) -> dict[str, str]:
    client = await Client.connect(address)
    return {wf.id: str(wf.status) async for wf in client.list_workflows("WorkflowType='JobWorkflow'")}


async def _scheduler_runs(address: str) -> list[SchedulerState | None]:
    """The input state of every run of the scheduler workflow, oldest first (None for the first run)."""
    client = await Client.connect(address)
    runs = [wf async for wf in client.list_workflows("WorkflowId='iris-scheduler'")]
    states: list[SchedulerState | None] = []
    for wf in sorted(runs, key=lambda w: w.start_time):
        handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
        async for event in handle.fetch_history_events():
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            # A continued run's input is (None, packed state); the first run's is null.
            packed = [p.data for p in payloads if p.metadata.get("encoding") == b"binary/plain"]
            states.append(unpack(packed[0]) if packed else None)
            break
    return states


async def _runs_of(address: str, workflow_id: str, record: str = "") -> int:
    """How many runs the workflow had; each one replays (and is recorded, see `replay_run`)."""
    client = await Client.connect(address)
    runs = client.list_workflows(f"WorkflowId='{workflow_id}'")
    return len([await replay_run(client, wf, record) async for wf in runs])


def test_scheduler_continues_as_new_and_carries_queued_and_running_work(make_cluster: MakeCluster) -> None:
    """With continue-as-new suggested after 20 events, the scheduler starts new runs carrying
    pending and placed tasks, a gang retried across job runs keeps its budgets, and every job succeeds."""
    c: FaultCluster = make_cluster(
        group("cpu", cpu=1, count=2, slice="s"), dynamic_config={"limit.historyCount.suggestContinueAsNew": "20"}
    )
    gang = c.client.submit_command(
        ["sh", "-c", '[ "$IRIS_ATTEMPT" -ge 2 ] || exit 1'],
        resources=ResourceSpec(cpu=0.5, memory="64m", replicas=2),
        coscheduling=CoschedulingConfig("slice"),
        max_retries_failure=2,
    )
    # 5 jobs of 3 tasks on 4 slots (there were 10): how many jobs is not what is checked, and 5 still make several
    # runs that start with tasks queued or placed (7-8 runs, 5-6 of them carrying work, in five runs here; 11-12 and
    # 9-10 with 10 jobs).
    jobs = [
        c.client.submit_command(["sleep", "0.2"], resources=ResourceSpec(cpu=0.5, memory="64m", replicas=3))
        for _ in range(5)
    ]
    deadline = time.monotonic() + 60  # ~6 s when healthy
    for j in jobs:
        assert JobState.SUCCEEDED == c.client.wait(j.job_id, timeout=max(1.0, deadline - time.monotonic())).state
    states = asyncio.run(_scheduler_runs(c.info.address))
    carried = [s for s in states[1:] if s and (s.pending or s.placements)]
    print(f"\nscheduler runs: {len(states)}, of which {len(carried)} started with queued or placed tasks")
    assert len(states) > 1
    assert carried  # a new run took over work in flight, and that work still finished
    assert {"cpu-0", "cpu-1"} == {w for s in states[1:] if s for w in s.workers}
    finished = c.client.wait(gang.job_id, timeout=60)
    assert [2, 2] == [t.attempt for t in finished.tasks]
    assert [2, 2] == [t.failure_count for t in finished.tasks]
    job_runs = asyncio.run(_runs_of(c.info.address, gang.job_id, record="gang"))
    assert job_runs > 1  # the gang's job continued-as-new between attempts


def test_sigkilled_worker_task_is_retried_and_its_orphan_killed_on_return(
    c: FaultCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGKILLed agent's task is retried elsewhere as a preemption once its lease has run out; the task
    process it left behind was killed by the lease watchdog meanwhile, and the agent restarted with the
    same id registers again and takes work."""
    for name, value in LOST_WORKER_AGENTS.items():
        monkeypatch.setenv(name, value)  # the restarted agent inherits IRIS_*, as the cluster's did
    runs = c.work / "runs"
    script = (
        f'echo "$IRIS_ATTEMPT $IRIS_WORKER_ID $$" >> {runs}; '
        'if [ "$IRIS_ATTEMPT" = 0 ]; then exec sleep 300; fi'
    )
    job = c.client.submit_command(["sh", "-c", script], resources=ONE_CPU, constraints=[Constraint("pool", "EQ", "f")])
    first = wait_until(lambda: lines(runs), what="attempt 0 started")[0].split()
    assert ["0", "victim-0"] == first[:2]  # best fit: the tighter worker takes it
    orphan = int(first[2])
    wait_until(lambda: c.status(job.job_id).state == JobState.RUNNING, what="job running")

    killed_at = time.monotonic()
    assert c.local.kill_process("victim-0", signal.SIGKILL, wait=5)
    def preempted() -> TaskStatus | None:
        task = c.status(job.job_id).tasks[0]
        return task if task.preemption_count >= 1 else None

    retried = wait_until(preempted, timeout=HEARTBEAT + FENCE + 3 * SLACK, interval=0.05, what="task preempted")
    detection = time.monotonic() - killed_at
    print(f"\nworker SIGKILL -> task WORKER_FAILED and retrying: {detection:.1f} s "
          f"(heartbeat timeout {HEARTBEAT:g} s, then {FENCE:g} s for the lease)")
    assert 0 == retried.failure_count
    ledger = c.local.home / "agents" / "victim-0" / "running"
    entries = {e.name: e.read_text() for e in ledger.iterdir()} if ledger.exists() else {}
    assert not pid_running(orphan), entries  # its agent is dead, but its lease ran out: the watchdog killed it
    assert detection < HEARTBEAT + FENCE + SLACK

    final = job.wait(timeout=60)
    task = final.tasks[0]
    assert (TaskState.SUCCEEDED, "spare-0", 1, 0, 1) == (
        task.state, task.worker_id, task.preemption_count, task.failure_count, task.attempt
    )
    victim = c.workers()["victim-0"]
    assert (False, ()) == (victim.healthy, victim.running_tasks)

    later = c.client.submit_command(["true"], resources=ONE_CPU, constraints=[Constraint("pool", "EQ", "f")])
    assert "spare-0" == later.wait(timeout=60).tasks[0].worker_id  # the dead worker gets no new work

    restarted_at = time.monotonic()
    c.local.start_worker(c.specs["victim-0"])
    wait_until(lambda: c.healthy("victim-0"), timeout=30, what="victim healthy again")
    print(f"agent restart -> healthy again: {time.monotonic() - restarted_at:.1f} s")
    assert 2 == len(lines(runs))  # attempt 0 (killed) and attempt 1, nothing else
    pinned = c.client.submit_command(["true"], resources=ONE_CPU, constraints=[Constraint("role", "EQ", "victim")])
    assert "victim-0" == pinned.wait(timeout=60).tasks[0].worker_id



def test_status_answers_from_temporal_while_the_controller_is_down(
    c: FaultCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the controller SIGSTOPped, `status` still answers within seconds: a finished job in full
    (from its history), a running one by its state, a pending one saying why there is no reason;
    and a fresh client (no cache) gets the same, so nothing waits on the missing controller.

    The fresh client's status query waits 0.5 s for the controller (IRIS_QUERY_TIMEOUT_SECONDS; 5 s by
    default): every query it makes goes to the stopped controller and must time out, three of them."""
    done = c.client.submit_command(["sh", "-c", "exit 3"], resources=ONE_CPU, constraints=ON_ONE)
    assert JobState.FAILED == done.wait(timeout=60, raise_on_failure=False).state
    running = c.client.submit_command(["sleep", "60"], resources=ONE_CPU, constraints=ON_ONE)
    wait_until(lambda: running.status().state == JobState.RUNNING, what="running")
    queued = c.client.submit_command(["true"], resources=ONE_CPU, constraints=ON_ONE)  # no room left: stays PENDING
    wait_until(lambda: queued.status().pending_reason != "", what="a pending reason")

    assert c.local.kill_process("controller", signal.SIGSTOP)
    try:
        monkeypatch.setenv("IRIS_QUERY_TIMEOUT_SECONDS", "0.5")  # read by the fresh client only
        fresh = IrisClient.connect(c.info.address, store=c.info.store_url)
        started = time.monotonic()
        finished = fresh.job_status(done.job_id)
        assert JobState.FAILED == finished.state
        assert [3] == [t.exit_code for t in finished.tasks]  # the whole status, from the job's history
        assert JobState.RUNNING == fresh.job_status(running.job_id).state
        pending = fresh.job_status(queued.job_id)
        assert JobState.PENDING == pending.state
        assert "controller" in pending.pending_reason
        elapsed = time.monotonic() - started
        print(f"\nthree statuses with the controller stopped: {elapsed:.1f} s")
        assert elapsed < 30  # each gives up on the controller after a few seconds, not the RPC's minute
    finally:
        c.local.kill_process("controller", signal.SIGCONT)
    running.terminate()
    assert JobState.SUCCEEDED == queued.wait(timeout=60).state  # and the controller carries on



def test_paused_worker_loses_its_tasks_to_another_and_leaks_no_capacity(c: FaultCluster) -> None:
    """Tasks placed on a SIGSTOPped agent move to another worker within the timeouts, never run
    on it after SIGCONT, and its capacity comes back."""
    runs = c.work / "runs"
    assert c.local.kill_process("paused-0", signal.SIGSTOP)
    stopped_at = time.monotonic()
    job = c.client.submit_command(
        ["sh", "-c", f'echo "$IRIS_TASK_INDEX $IRIS_ATTEMPT $IRIS_WORKER_ID" >> {runs}'],
        resources=ResourceSpec(cpu=1, memory="100m", replicas=8),
        constraints=[Constraint("zone", "EQ", "z")],
    )
    wait_until(lambda: len(c.workers()["paused-0"].running_tasks) == 8, what="all 8 placed on the paused worker")
    wait_until(
        lambda: len(lines(runs)) == 8,
        timeout=2 * DISPATCH + HEARTBEAT + 2 * SLACK, interval=0.05, what="all 8 started elsewhere",
    )
    moved = time.monotonic() - stopped_at
    status = job.wait(timeout=60)
    tasks = status.tasks
    dispatch_failures = [t.attempt - t.preemption_count for t in tasks]
    print(f"\nagent SIGSTOP -> all 8 tasks running elsewhere: {moved:.1f} s; per task "
          f"(attempt, preemptions): {[(t.attempt, t.preemption_count) for t in tasks]}")
    assert {"other-0"} == {t.worker_id for t in tasks}
    assert [0] * 8 == [t.failure_count for t in tasks]
    assert any(d > 0 for d in dispatch_failures)  # some were never picked up: released at the dispatch timeout
    paused = c.workers()["paused-0"]
    assert (False, ()) == (paused.healthy, paused.running_tasks)  # nothing committed on it while paused
    # A frozen agent is not "down" (its process lives): cluster status names it among the unhealthy workers.
    assert f"workers: {len(c.specs) - 1} healthy of {len(c.specs)} (unhealthy: paused-0)" in iris(
        c, "cluster", "status"
    ).stdout

    assert c.local.kill_process("paused-0", signal.SIGCONT)
    wait_until(lambda: c.healthy("paused-0"), timeout=30, what="paused worker re-registered")
    full = c.client.submit_command(
        ["true"], resources=ResourceSpec(cpu=8, memory="100m"), constraints=[Constraint("role", "EQ", "paused")]
    )
    assert "paused-0" == full.wait(timeout=60).tasks[0].worker_id  # all 8 cpus are free again
    # It has taken new work since it woke: whatever its polls from before the pause handed it came first.
    assert [] == [line for line in lines(runs) if "paused-0" in line]



def test_a_terminated_scheduler_starts_again_empty_and_rebuilds_from_the_workers_and_tasks(c: FaultCluster) -> None:
    """Terminate the singleton scheduler and restart the controller: the fresh scheduler learns the
    worker again, books the running task's place (so nothing is put beside it) and queues the waiting job."""
    gate = c.work / "go"  # the first job runs until the test lets it end (8 s once ended before the checks)
    running = c.client.submit_command(
        ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"], resources=ONE_CPU, constraints=ON_ONE
    )
    wait_until(lambda: c.status(running.job_id).state == JobState.RUNNING, what="first job running")
    # No room until the first ends; run before the test opens the gate (beside the first), it fails.
    waiting = c.client.submit_command(["test", "-e", str(gate)], resources=ONE_CPU, constraints=ON_ONE)
    wait_until(lambda: c.status(waiting.job_id).pending_reason, what="second job waiting with a reason")

    async def scheduler_run() -> tuple[str, bool]:
        desc = await (await Client.connect(c.info.address)).get_workflow_handle("iris-scheduler").describe()
        return desc.run_id, desc.status == WorkflowExecutionStatus.RUNNING

    async def terminate_scheduler() -> None:
        temporal = await Client.connect(c.info.address)
        await temporal.get_workflow_handle("iris-scheduler").terminate("test: the singleton is lost")

    lost_run, _ = asyncio.run(scheduler_run())
    asyncio.run(terminate_scheduler())
    c.local.kill_process("controller", signal.SIGTERM, wait=30)
    c.local.restart_process("controller")  # starts a scheduler, which finds itself empty
    wait_until(lambda: (run := asyncio.run(scheduler_run()))[0] != lost_run and run[1], timeout=60,
               what="a new scheduler running")  # fmt: skip
    def claimed() -> WorkerStatus | None:
        w = c.workers().get("cpu-0")
        return w if w is not None and w.running_tasks else None

    worker = wait_until(claimed, timeout=60, what="the worker registered again, the running task's place claimed")
    assert worker.healthy
    assert (f"{running.job_id}/task-0",) == tuple(worker.running_tasks)
    assert JobState.PENDING == c.status(waiting.job_id).state  # not placed beside the running task
    gate.touch()
    assert JobState.SUCCEEDED == c.client.wait(running.job_id, timeout=60).state
    done = c.client.wait(waiting.job_id, timeout=60)
    assert JobState.SUCCEEDED == done.state
    assert 0 == done.tasks[0].failure_count  # it first ran once the first had ended


def test_temporal_server_restart_on_the_same_db_loses_no_job(c: FaultCluster) -> None:
    """After the dev server is SIGKILLed and restarted on its SQLite file, every job is listed
    with its state and all finish, while agents and controller stay up."""
    done = c.client.submit_command(["true"], resources=ONE_CPU, constraints=ON_TWO)
    assert JobState.SUCCEEDED == done.wait(timeout=60).state
    gate = c.work / "go"  # the running tasks end when the test says (during the outage), not after a fixed time
    waits = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"]
    jobs = [c.client.submit_command(waits, resources=ONE_CPU, constraints=ON_TWO) for _ in range(3)]
    wait_until(lambda: sum(j.status().state == JobState.RUNNING for j in jobs) == 2, what="two running")
    assert [JobState.PENDING] == [s for j in jobs if (s := j.status().state) != JobState.RUNNING]  # no room left
    earlier = set(asyncio.run(_all_jobs(c.info.address)))  # and the other tests' jobs (this one's may lag)

    assert c.local.kill_process("temporal", signal.SIGKILL, wait=5)
    gate.touch()  # the two running tasks end while the server is away
    everyone = sorted(["controller", *(f"worker-{w}" for w in c.specs)])
    holds_throughout(lambda: everyone == c.alive(), seconds=3.0, what="nobody dies with the server")
    down_at = time.monotonic()
    c.local.restart_process("temporal")

    def listed() -> dict[str, str] | None:
        try:
            return asyncio.run(_all_jobs(c.info.address))
        except Exception:  # the restarted server may still be warming up
            return None

    ids = wait_until(listed, timeout=30, what="jobs listed again")
    assert earlier | {done.job_id, *(j.job_id for j in jobs)} == set(ids)
    assert JobState.SUCCEEDED == c.status(done.job_id).state
    for j in jobs:
        assert JobState.SUCCEEDED == c.client.wait(j.job_id, timeout=90).state
    print(f"\ntemporal restart -> all 3 jobs done: {time.monotonic() - down_at:.1f} s; "
          f"preemptions {[t.preemption_count for j in jobs for t in j.status().tasks]}")
    assert [0, 0, 0] == [t.failure_count for j in jobs for t in j.status().tasks]
    wait_until(lambda: all(w.healthy for w in c.workers().values()), timeout=30, what="workers healthy again")
    assert sorted([*everyone, "temporal"]) == c.alive()
    assert JobState.SUCCEEDED == c.client.submit_command(["true"], resources=ONE_CPU, constraints=ON_TWO).wait(
        timeout=60
    ).state
