"""Helpers shared by the end-to-end and fault suites: a running cluster, polling, the process table."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution, WorkflowHandle, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker, WorkflowReplayResult, WorkflowRunner

from activities.contracts import AUTOSCALER_WORKFLOW_ID
from iris.controller.control_plane import controller_replayer, controller_runner
from iris.controller.payload_guard import PayloadGuard
from iris.deploy.worker_versioning import deployment_config, promote
from iris.local.cluster import ClusterInfo, LocalCluster
from iris.query_retry import QueryRetry

TEMPORAL = Path(sys.executable).with_name("temporal")
TEST_BUILD = "test"  # the control deployment's version in `workflows_on_dev_server`
WAL_ARGS = ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]

# A SIGKILLed controller's workflows stand still until Temporal gives up on it: their next task waits out the
# sticky timeout, a task it had taken the workflow task timeout (10 s each by default; docs/configuration.md,
# 'Controller restarts'). A test that kills a controller waits for those, not for anything it checks; a loaded
# machine's workflow tasks still take well under these.
DEAD_CONTROLLER_ENV = {"IRIS_STICKY_TIMEOUT_SECONDS": "3"}  # iris controller serve --sticky-timeout
DEAD_CONTROLLER_SERVER = {"history.defaultWorkflowTaskTimeout": '"4s"'}  # the dev server's, for every workflow


@dataclass
class Cluster:
    """A running local cluster started by a test fixture."""

    local: LocalCluster
    info: ClusterInfo

    @property
    def env(self) -> dict[str, str]:
        """Environment for `iris` CLI subprocesses pointed at this cluster."""
        return {
            **os.environ,
            "IRIS_TEMPORAL_ADDRESS": self.info.address,
            "IRIS_STORE": self.info.store_url,
            "IRIS_HOME": str(self.local.home),
        }


T = TypeVar("T")


@contextlib.contextmanager
def running_cluster(home: Path, config: Any, dynamic_config: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """A local cluster in `home` for the span of a fixture, stopped afterwards."""
    local = LocalCluster(home)
    info = local.up(config, dynamic_config=dynamic_config)
    try:
        yield Cluster(local, info)
    finally:
        local.down()


def short_dead_controller_waits(
    env: pytest.MonkeyPatch, dynamic_config: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Have Temporal give up on a killed controller sooner (DEAD_CONTROLLER_*): set the sticky timeout in `env`,
    which every controller started from now inherits (at each restart too); return `dynamic_config` with the
    workflow task timeout, to start the dev server with."""
    for name, value in DEAD_CONTROLLER_ENV.items():
        env.setenv(name, value)
    return {**(dynamic_config or {}), **DEAD_CONTROLLER_SERVER}


def worker_serve_refusal(args: Sequence[str], env: Mapping[str, str], home: Path) -> str:
    """The stderr of `iris worker serve ARGS` pointed at nothing, with `env` added, after checking that it was refused
    as a usage error (exit 2) before it reached anything."""
    done = subprocess.run(
        [sys.executable, "-m", "iris", "worker", "serve", *args, "--temporal", "127.0.0.1:1", "--store", "file:///x"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "IRIS_HOME": str(home), **env},
    )  # fmt: skip
    assert 2 == done.returncode, done.stderr
    return done.stderr


def command_imports(
    args: Sequence[str], env: Mapping[str, str], cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`iris ARGS` run under `-X importtime`, and every module it imported from start to exit, in order (each is
    named as it is imported: the command leaves by `os._exit`, so nothing can be asked at its end)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "iris", *args], cwd=cwd, env=dict(env),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    names = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done, names


def wait_until(predicate: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1, what: str = "",
               explain: Callable[[], str] | None = None) -> T:  # fmt: skip
    """Poll `predicate` until it returns something truthy; that value, or AssertionError after `timeout` s (with
    what `explain` says then: the state that tells why it did not happen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            why = f"; {explain()}" if explain is not None else ""
            raise AssertionError(f"not within {timeout} s: {what or predicate}{why}")
        time.sleep(interval)


def lines(path: Path) -> list[str]:
    """The lines of a file tasks append to; none while it does not exist."""
    return path.read_text().splitlines() if path.exists() else []


def logged(path: Path, event: str) -> int:
    """How many of a daemon's log lines (structlog, one JSON object each) record `event`."""
    needle = f'"event": "{event}"'
    return sum(needle in line for line in lines(path))


def holds_throughout(predicate: Callable[[], object], seconds: float, interval: float = 0.2, what: str = "") -> None:
    """`predicate` holds at every poll for `seconds`, else AssertionError at the first poll it fails.

    For a test whose premise is a span of time (a server away for 15 s): "nothing went wrong" is watched
    the whole time, not checked once after a sleep.
    """
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        assert predicate(), f"stopped holding after {time.monotonic() - began:.1f} s: {what or predicate}"
        time.sleep(interval)


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of `pid` from /proc, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[2])


def pid_running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def pid_gone(pid: int) -> bool:
    """Whether `pid` has exited (gone, or a zombie nobody reaped yet)."""
    return not pid_running(pid)


def engines_required() -> bool:
    """Under CI (CI=true) or IRIS_REQUIRE_ENGINES=1 a missing engine (dockerd, containerd, sshd) fails the run."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("IRIS_REQUIRE_ENGINES") == "1"


def missing_engine(reason: str) -> None:
    """Skip the test because an engine is missing, or fail it where engines are required."""
    import pytest

    if engines_required():
        pytest.fail(f"required engine missing: {reason}")
    pytest.skip(reason)


def forget_workers(cluster: Cluster, worker_ids: list[str]) -> None:
    """Tell the scheduler the slice is gone, as SliceWorkflow does after terminate (for tests that call a platform
    directly), so the slice's dead workers do not linger in a shared cluster's worker list."""
    from temporalio.client import Client

    from activities.contracts import SCHEDULER_WORKFLOW_ID
    from workflows.messages import RemoveWorkers

    async def signal() -> None:
        temporal = await Client.connect(cluster.info.address)
        await temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(
            "remove_workers", RemoveWorkers(worker_ids, reason="slice terminated by the test")
        )

    asyncio.run(signal())


@contextlib.asynccontextmanager
async def workflows_on_dev_server(
    name: str,
    workflows: Sequence[type],
    activities: Sequence[Callable[..., Any]],
    runner: WorkflowRunner | None = None,
    unsandboxed_runner: WorkflowRunner | None = None,
    queue: str | None = None,
    dynamic_config: Mapping[str, str] | None = None,
    max_cached_workflows: int = 1000,
) -> AsyncIterator[tuple[Client, str]]:
    """A fresh dev server (with `dynamic_config` values, e.g. a low continue-as-new suggestion) and a worker serving
    `workflows` and `activities` on a new task queue, or on `queue` (`runner` runs the sandboxed ones,
    `unsandboxed_runner` the others, when given; `max_cached_workflows=0`: every workflow task replays its run).

    The worker is a version of the control deployment made current, as a controller's is (Iris
    workflows declare how they are versioned, which only a versioned worker accepts). Yields the
    client and the queue; the worker and the server are stopped on the way out.
    """
    extra = [a for key, value in (dynamic_config or {}).items() for a in ("--dynamic-config-value", f"{key}={value}")]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL), dev_server_extra_args=[*WAL_ARGS, *extra]
    )
    queue = queue or f"{name}-{uuid.uuid4().hex[:8]}"
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as executor:
            async with Worker(
                env.client, task_queue=queue, workflows=list(workflows), activities=list(activities),
                activity_executor=executor, workflow_runner=runner or controller_runner(),
                unsandboxed_workflow_runner=unsandboxed_runner or UnsandboxedWorkflowRunner(),
                interceptors=[PayloadGuard()],  # an unreadable signal is dropped, as a controller drops it
                deployment_config=deployment_config(TEST_BUILD), max_cached_workflows=max_cached_workflows,
            ):  # fmt: skip
                await promote(env.client, TEST_BUILD)
                # Asked as an Iris client asks: a query the look-ahead guard refused is asked again.
                client = Client(env.client.service_client, namespace=env.client.namespace, interceptors=[QueryRetry()])
                yield client, queue
    finally:
        await env.shutdown()


async def replay(replayer: Replayer, history: WorkflowHistory) -> WorkflowReplayResult | None:
    """Replay `history`; None when it has no completed workflow task yet (nothing to check).

    A run listed the moment it began has only its start event, and the SDK's Replayer waits
    forever on such a history (seen as a test hanging until its timeout), so those are skipped.
    """
    if not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events):
        return None
    return await replayer.replay_workflow(history, raise_on_replay_failure=False)


async def fetch_and_replay(client: Client, runs: Sequence[WorkflowExecution]) -> list[tuple[WorkflowHistory, str]]:
    """Each run's history and its replay failure ("" when it replays, or has no completed workflow task yet).

    Histories are fetched a few at a time and replayed through one replay worker: a worker per history
    (`replay`) costs ~40 ms each, against ~8 ms each here, which adds up over a session's ~1,000 runs.
    """
    gate = asyncio.Semaphore(8)

    async def fetch(wf: WorkflowExecution) -> WorkflowHistory:
        async with gate:
            return await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()

    histories = await asyncio.gather(*(fetch(wf) for wf in runs))
    done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    checked = [h for h in histories if any(e.event_type == done for e in h.events)]  # see `replay`

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in checked:
            yield history

    failures: dict[int, str] = {}
    ours = {id(h) for h in checked}
    async with controller_replayer().workflow_replay_iterator(each()) as results:
        async for result in results:
            assert id(result.history) in ours, "a replay result for a history not given: failures would be lost"
            if result.replay_failure is not None:
                failures[id(result.history)] = str(result.replay_failure)
    return [(h, failures.get(id(h), "")) for h in histories]


async def replay_run(client: Client, wf: WorkflowExecution, record: str = "") -> WorkflowHistory:
    """Fetch one run's history and replay it against the current workflow code.

    With `record` (a name) and IRIS_RECORD_HISTORIES=DIR set, the history is also saved there as a
    replay fixture for tests/test_replay_recorded.py.
    """
    history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
    replayer = controller_replayer()  # as the controller runs them
    result = await replay(replayer, history)
    assert result is None or result.replay_failure is None, f"{wf.id} run {wf.run_id}: {result.replay_failure}"
    folder = os.environ.get("IRIS_RECORD_HISTORIES", "") if record else ""
    if folder:
        name = f"{wf.workflow_type}-{record}-{wf.status.name.lower() if wf.status else ''}-{wf.run_id[-8:]}.json"
        fixture = {"workflow_id": wf.id, "history": json.loads(history.to_json())}
        (Path(folder) / name).write_text(json.dumps(fixture))
    return history


async def workflow_settled(handle: WorkflowHandle[Any, Any], timeout: float = 90) -> None:
    """Wait until the workflow has nothing in flight: no activity and no workflow task pending or open.

    A finished activity schedules the next workflow task in the same transaction, so this is never seen between.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        raw = (await handle.describe()).raw_description
        if not raw.pending_activities and not raw.HasField("pending_workflow_task"):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"still busy after {timeout} s")


_ACTIVITY_ENDS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


def armed_timers(history: WorkflowHistory) -> list[float] | None:
    """The durations (seconds) of the timers a run has started that have neither fired nor been cancelled,
    as of the history's end: what alone can wake the run without a signal. None while the run is busy (a
    workflow task scheduled after the last one completed, or an activity in flight), read from the same
    history, so no second call races the first."""
    armed: dict[int, float] = {}
    activities: set[int] = set()
    task_open = False
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_TIMER_STARTED:
            timeout = event.timer_started_event_attributes.start_to_fire_timeout
            armed[event.event_id] = timeout.ToTimedelta().total_seconds()
        elif kind == EventType.EVENT_TYPE_TIMER_FIRED:
            armed.pop(event.timer_fired_event_attributes.started_event_id, None)
        elif kind == EventType.EVENT_TYPE_TIMER_CANCELED:
            armed.pop(event.timer_canceled_event_attributes.started_event_id, None)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities.add(event.event_id)
        elif kind in _ACTIVITY_ENDS:
            activities.discard(getattr(event, _ACTIVITY_ENDS[kind]).scheduled_event_id)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            task_open = True
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task_open = False
    return None if task_open or activities else list(armed.values())


@dataclass(frozen=True)
class PlanMark:
    """Where the autoscaler stood: its run and how many plans that run had made."""

    run_id: str
    plans: int


async def autoscaler_history(address: str) -> WorkflowHistory:
    client = await Client.connect(address)
    return await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).fetch_history()


def autoscaler_mark(address: str) -> PlanMark:
    """The autoscaler's plans so far in its current run (a plan is a local activity: one marker each)."""
    history = asyncio.run(autoscaler_history(address))
    plans = sum(e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED for e in history.events)
    return PlanMark(history.events[0].workflow_execution_started_event_attributes.original_execution_run_id, plans)


def plans_since(address: str, mark: PlanMark) -> int:
    """How many plans the autoscaler has made since `mark`: each is a chance it had to act (a new run's all count)."""
    now = autoscaler_mark(address)
    return now.plans - mark.plans if now.run_id == mark.run_id else now.plans


def memo_not_carried(earlier: WorkflowHistory, later: WorkflowHistory) -> list[str]:
    """The memo keys whose last value in run `earlier` (given at its start, or upserted since) run `later`, the one it
    continued as, did not start with (workflows/memo.py: given no memo, the server starts the next run with the memo
    the closing run started with)."""
    memo = dict(earlier.events[0].workflow_execution_started_event_attributes.memo.fields)
    for event in earlier.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            for key, value in event.workflow_properties_modified_event_attributes.upserted_memo.fields.items():
                # The server removes a key upserted as None or as an empty list (its MergeMapOfPayload).
                if value.metadata.get("encoding") == b"binary/null" or value.data in (b"null", b"[]"):
                    memo.pop(key, None)
                else:
                    memo[key] = value
    started = later.events[0].workflow_execution_started_event_attributes.memo.fields
    return sorted(key for key, value in memo.items() if key not in started or started[key] != value)
