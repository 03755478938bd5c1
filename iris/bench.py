"""`python -m iris.bench`: Iris's latency and throughput next to the bare Temporal dev server it runs on.

One run starts one local cluster (Temporal dev server with the WAL pragmas, the
controller, two worker agents) in a fresh home, measures, and always stops it again
(on success, on error and on Ctrl-C / SIGTERM). Both sides are measured against the
same server, from this process:

- raw: a bare workflow executing one no-op activity, on an in-process worker polling a
  fresh task queue. Latency is "start workflow -> the activity begins" (the activity
  returns its own `time.time()`); throughput is N workflows started at once, all awaited.
- Iris: submit-to-running of a one-task job on an idle cluster, from just before
  `submit_command` to the moment the task's process starts (the command prints
  `date +%s.%N`, read back from the task's log), plus submit-to-SUCCEEDED as the client
  observes it; throughput is N one-task `true` jobs submitted at once, all awaited.

Then it prints a table with the targets (Iris submit-to-running median < 0.5 s, Iris
throughput >= 40 % of raw), what each throughput run cost (workflow tasks and history
events per job, CPU seconds per process), and (unless `--no-timeline`) the merged history
events of the last latency job, its task and the scheduler, so the hops can be counted.

The bare workflow runs on an unsandboxed in-process worker (it imports nothing and does
nothing non-deterministic), so this module needs no sandbox-safe imports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import structlog
import temporalio
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from iris.client import AsyncIrisClient
from iris.config import ClusterConfig, parse_config
from iris.local_cluster import ClusterInfo, LocalCluster, temporal_binary
from iris.types import JobState, ResourceSpec
from workflows.ids import SCHEDULER_WORKFLOW_ID, task_workflow_id

_T = TypeVar("_T")

TARGET_LATENCY_SECONDS = 0.5
"""Issue target: Iris submit-to-running median on an idle cluster."""
TARGET_THROUGHPUT_RATIO = 0.40
"""Issue target: Iris jobs/s as a fraction of the bare dev server's workflows/s."""
WARMUP_SAMPLES = 2
TASK_CPU = 0.1
TASK_MEMORY = "32m"
BENCH_FLEET: dict[str, Any] = {
    "local": {
        "worker_groups": [
            {"name": "bench", "count": 2, "resources": {"cpu": 16, "memory": "16g"}},
        ]
    }
}
"""Two local workers with room for 2 x 160 tasks of 0.1 cpu / 32 MiB: capacity never limits the run.

The default fleet (`iris.config.default_config`: 2 workers x 2 cores, 4 GiB) fits only 2 x 4
tasks of the default 1 GiB, or 2 x 20 of 0.1 cpu, so 200 jobs at once would measure queueing.
"""
LATENCY_COMMAND = ["sh", "-c", "date +%s.%N"]
THROUGHPUT_COMMAND = ["true"]
BARE_ACTIVITY = "iris_bench_noop"
BARE_WORKFLOW = "IrisBenchBare"
JOB_TIMEOUT_SECONDS = 120.0


# ---------------------------------------------------------------------------- the bare baseline


@activity.defn(name=BARE_ACTIVITY)
async def bare_noop() -> float:
    """The raw baseline's only activity: return the wall-clock time at which it began."""
    return time.time()


@workflow.defn(name=BARE_WORKFLOW)
class BareWorkflow:
    """A bare workflow that executes one no-op activity and returns the activity's start time."""

    @workflow.run
    async def run(self) -> float:
        """Run the activity with default retries; the result is its `time.time()` at start."""
        result: float = await workflow.execute_activity(bare_noop, start_to_close_timeout=timedelta(seconds=30))
        return result


# ---------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be between 0 and 100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, including reaped children such as task processes) of `pid`; Linux only."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # from field 3 (state) on
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, summed over cores; Linux only."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(x) for x in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values[:8]) - idle) / tick, sum(values[:8]) / tick


class CpuMeter:
    """CPU seconds used by named processes (and by the whole machine) between `start` and `stop`."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._before: dict[str, float | None] = {}
        self._machine: tuple[float, float] | None = None
        self._wall = 0.0
        self.used: dict[str, float] = {}
        """Per process; `machine busy` is every process on the host (other users' included)."""

    def start(self) -> None:
        """Take the first reading."""
        self._before = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine = machine_cpu_seconds()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        """Take the second reading; CPU seconds per process, plus `machine busy` and `wall`."""
        used: dict[str, float] = {}
        for name, pid in self.pids.items():
            before, after = self._before.get(name), process_cpu_seconds(pid)
            if before is not None and after is not None:
                used[name] = round(after - before, 2)
        machine = machine_cpu_seconds()
        if machine is not None and self._machine is not None:
            used["machine busy"] = round(machine[0] - self._machine[0], 2)
        used["wall"] = round(time.monotonic() - self._wall, 2)
        self.used = used
        return used


@dataclass(frozen=True)
class Latency:
    """Sequential latency samples in seconds, summarized."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The 50th percentile."""
        return percentile(self.samples, 50)

    @property
    def p90(self) -> float:
        """The 90th percentile."""
        return percentile(self.samples, 90)

    def summary(self) -> dict[str, Any]:
        """Median, p90, min, max and the samples, for `--json`."""
        return {
            "median_s": self.median,
            "p90_s": self.p90,
            "min_s": min(self.samples),
            "max_s": max(self.samples),
            "samples_s": list(self.samples),
        }


@dataclass(frozen=True)
class Throughput:
    """`count` units started at once, all finished after `elapsed` seconds."""

    count: int
    elapsed: float
    accepted: float
    """Seconds until every start/submit call had returned."""
    cpu: dict[str, float] = field(default_factory=dict, compare=False)
    """CPU seconds per process during the run (see CpuMeter)."""
    started_at: float = 0.0
    """Wall-clock time of the first start/submit call."""
    ended_at: float = 0.0
    """Wall-clock time the last unit was seen finished."""
    workflow_tasks: dict[str, int] = field(default_factory=dict, compare=False)
    """Workflow tasks completed during the run, per kind of workflow (see `count_history`)."""
    events: dict[str, int] = field(default_factory=dict, compare=False)
    """History events written during the run, per kind of workflow."""

    @property
    def rate(self) -> float:
        """Units per second, start of the first to end of the last."""
        return self.count / self.elapsed

    def summary(self) -> dict[str, Any]:
        """The figures for `--json`."""
        return {
            "count": self.count,
            "elapsed_s": self.elapsed,
            "accepted_s": self.accepted,
            "rate_per_s": self.rate,
            "cpu_s": self.cpu,
            "workflow_tasks": self.workflow_tasks,
            "history_events": self.events,
        }


@dataclass
class TimelineEvent:
    """One history event on the submit-to-running path, relative to the client's submit."""

    at_ms: float
    workflow: str
    event_id: int
    event: str
    detail: str = ""


@dataclass
class BenchResult:
    """Everything one run measured."""

    machine: dict[str, Any]
    raw_latency: Latency
    raw_latency_done: Latency
    raw_throughput: Throughput
    iris_latency: Latency
    iris_latency_done: Latency
    iris_submit_call: Latency
    iris_throughput: Throughput
    timeline: list[TimelineEvent] = field(default_factory=list)
    timeline_job: str = ""
    timeline_running_ms: float = 0.0
    workflow_tasks_before_running: dict[str, int] = field(default_factory=dict)

    @property
    def latency_ratio(self) -> float:
        """Iris submit-to-running median / raw start-to-activity median (lower is better)."""
        return self.iris_latency.median / self.raw_latency.median

    @property
    def throughput_ratio(self) -> float:
        """Iris jobs/s / raw workflows/s (higher is better)."""
        return self.iris_throughput.rate / self.raw_throughput.rate

    def targets(self) -> dict[str, bool]:
        """Whether each target from the issue is met."""
        return {
            "iris_submit_to_running_median_lt_0.5s": self.iris_latency.median < TARGET_LATENCY_SECONDS,
            "iris_throughput_ge_40pct_raw": self.throughput_ratio >= TARGET_THROUGHPUT_RATIO,
        }

    def to_json(self) -> dict[str, Any]:
        """The figures as one JSON document."""
        return {
            "machine": self.machine,
            "raw": {
                "start_to_activity": self.raw_latency.summary(),
                "start_to_result": self.raw_latency_done.summary(),
                "throughput": self.raw_throughput.summary(),
            },
            "iris": {
                "submit_to_running": self.iris_latency.summary(),
                "submit_to_succeeded_observed": self.iris_latency_done.summary(),
                "submit_call": self.iris_submit_call.summary(),
                "throughput": self.iris_throughput.summary(),
            },
            "ratios": {"latency_median": self.latency_ratio, "throughput": self.throughput_ratio},
            "targets": self.targets(),
            "timeline": {
                "job_id": self.timeline_job,
                "running_at_ms": self.timeline_running_ms,
                "workflow_tasks_before_running": self.workflow_tasks_before_running,
                "events": [asdict(e) for e in self.timeline],
            },
        }


# ---------------------------------------------------------------------------- measuring


async def _timed_gather(
    count: int,
    start: Callable[[int], Awaitable[_T]],
    finish: Callable[[_T], Awaitable[object]],
    pids: Mapping[str, int],
) -> tuple[Throughput, list[_T]]:
    """Start `count` units concurrently, then await every one; the figures (with CPU of `pids`), the handles."""
    meter = CpuMeter(pids)
    meter.start()
    wall = time.time()
    t0 = time.perf_counter()
    handles = await asyncio.gather(*(start(i) for i in range(count)))
    accepted = time.perf_counter() - t0
    await asyncio.gather(*(finish(h) for h in handles))
    elapsed = time.perf_counter() - t0
    figures = Throughput(
        count=count,
        elapsed=elapsed,
        accepted=accepted,
        cpu=meter.stop(),
        started_at=wall,
        ended_at=wall + elapsed,
    )
    return figures, handles


async def count_history(
    client: Client, workflow_id: str, since: float = -math.inf, until: float = math.inf
) -> tuple[int, int]:
    """(workflow tasks completed, events) of `workflow_id` between `since` and `until` (wall clock).

    Earlier runs are followed through continue-as-new while they may still hold events in the window.
    A workflow that does not exist counts zero (e.g. a job that runs its task without a child).
    """
    tasks = events = 0
    run_id: str | None = None
    while True:
        try:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return tasks, events
            raise
        previous, first_at = "", math.inf
        for event in history.events:
            at = event.event_time.seconds + event.event_time.nanos / 1e9
            if event.event_id == 1:
                previous = event.workflow_execution_started_event_attributes.continued_execution_run_id
                first_at = at
            if since <= at <= until:
                events += 1
                tasks += event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        if not previous or first_at < since:
            return tasks, events
        run_id = previous


async def count_histories(
    client: Client, groups: Mapping[str, Sequence[str]], since: float = -math.inf, until: float = math.inf
) -> tuple[dict[str, int], dict[str, int]]:
    """Workflow tasks and events per group of workflow ids (a few fetches at a time)."""
    limit = asyncio.Semaphore(16)

    async def one(workflow_id: str) -> tuple[int, int]:
        async with limit:
            return await count_history(client, workflow_id, since, until)

    tasks: dict[str, int] = {}
    events: dict[str, int] = {}
    for name, ids in groups.items():
        counts = await asyncio.gather(*(one(i) for i in ids))
        tasks[name] = sum(c[0] for c in counts)
        events[name] = sum(c[1] for c in counts)
    return tasks, events


async def measure_raw(
    client: Client, samples: int, count: int, pids: Mapping[str, int]
) -> tuple[Latency, Latency, Throughput]:
    """The bare dev server: sequential start-to-activity latency, then `count` workflows at once.

    The worker runs unsandboxed: the bare workflow imports nothing and does nothing
    non-deterministic, and the baseline should be the engine, not the Python sandbox.
    """
    queue = f"iris-bench-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BareWorkflow],
        activities=[bare_noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_workflow_tasks=200,  # as the Iris controller's worker
    )
    async with worker:

        async def one(i: int) -> tuple[float, float]:
            t0 = time.time()
            began: float = await client.execute_workflow(BareWorkflow.run, id=f"{queue}-lat-{i}", task_queue=queue)
            return began - t0, time.time() - t0

        for i in range(WARMUP_SAMPLES):
            await one(-1 - i)
        pairs = [await one(i) for i in range(samples)]

        async def start(i: int) -> Any:
            return await client.start_workflow(BareWorkflow.run, id=f"{queue}-tput-{i}", task_queue=queue)

        async def finish(handle: Any) -> object:
            result: object = await handle.result()
            return result

        throughput, handles = await _timed_gather(count, start, finish, pids)
    tasks, events = await count_histories(client, {"bare": [h.id for h in handles]})
    throughput.workflow_tasks.update(tasks)
    throughput.events.update(events)
    return (
        Latency(tuple(p[0] for p in pairs)),
        Latency(tuple(p[1] for p in pairs)),
        throughput,
    )


def _resources() -> ResourceSpec:
    """Every bench task's request: small, so all 200 throughput jobs fit on the bench fleet at once."""
    return ResourceSpec(cpu=TASK_CPU, memory=TASK_MEMORY)


async def _wait_succeeded(iris: AsyncIrisClient, job_id: str) -> None:
    """Wait for `job_id`; a job that ends in any other state than SUCCEEDED fails the bench."""
    status = await iris.wait(job_id, timeout=JOB_TIMEOUT_SECONDS)
    if status.state != JobState.SUCCEEDED:
        raise RuntimeError(f"bench job {job_id} ended {status.state}: {status.error or status.tasks}")


def _process_start(lines: Sequence[str], job_id: str) -> float:
    """The `date +%s.%N` the latency job printed (its last parseable line)."""
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            return float(line.strip())
    raise RuntimeError(f"bench job {job_id} printed no timestamp; its log: {list(lines)!r}")


async def iris_latency_sample(iris: AsyncIrisClient, name: str) -> tuple[str, float, float, float, float]:
    """One one-task job on the idle cluster: (job id, submit time, running at, submit call s, done at)."""
    t0 = time.time()
    job_id = await iris.submit_command(LATENCY_COMMAND, resources=_resources(), name=name)
    submitted = time.time() - t0
    await _wait_succeeded(iris, job_id)
    done = time.time()
    running = _process_start(iris.fetch_task_logs(job_id, 0), job_id)
    return job_id, t0, running, submitted, done


async def measure_iris(
    iris: AsyncIrisClient, samples: int, count: int, pids: Mapping[str, int]
) -> tuple[Latency, Latency, Latency, Throughput, tuple[str, float, float, float]]:
    """Sequential submit-to-running latency (after warm-up), then `count` one-task jobs at once.

    Also returns (job id, submit time, running time, done time) of the last latency
    sample, for the timeline.
    """
    for i in range(WARMUP_SAMPLES):
        await iris_latency_sample(iris, f"bench-warmup-{i}")
    rows = [await iris_latency_sample(iris, f"bench-latency-{i}") for i in range(samples)]
    last = rows[-1]

    async def start(i: int) -> str:
        return await iris.submit_command(THROUGHPUT_COMMAND, resources=_resources(), name=f"bench-tput-{i}")

    async def finish(job_id: str) -> None:
        await _wait_succeeded(iris, job_id)

    throughput, job_ids = await _timed_gather(count, start, finish, pids)
    tasks, events = await count_histories(
        iris.temporal, {"job": job_ids, "task": [task_workflow_id(j, 0) for j in job_ids]}
    )
    throughput.workflow_tasks.update(tasks)
    throughput.events.update(events)
    sched_tasks, sched_events = await count_histories(
        iris.temporal, {"scheduler": [SCHEDULER_WORKFLOW_ID]}, throughput.started_at, throughput.ended_at
    )
    throughput.workflow_tasks.update(sched_tasks)
    throughput.events.update(sched_events)
    return (
        Latency(tuple(r[2] - r[1] for r in rows)),
        Latency(tuple(r[4] - r[1] for r in rows)),
        Latency(tuple(r[3] for r in rows)),
        throughput,
        (last[0], last[1], last[2], last[4]),
    )


# ---------------------------------------------------------------------------- the timeline


def describe_event(event: HistoryEvent) -> tuple[str, str]:
    """A history event's short type name and the detail that tells the hops apart."""
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    which = event.WhichOneof("attributes")
    if which is None:
        return name, ""
    attrs = getattr(event, which)
    detail = ""
    if which == "workflow_execution_signaled_event_attributes":
        detail = attrs.signal_name
    elif which == "signal_external_workflow_execution_initiated_event_attributes":
        detail = f"{attrs.signal_name} -> {attrs.workflow_execution.workflow_id}"
    elif which == "activity_task_scheduled_event_attributes":
        detail = f"{attrs.activity_type.name} on {attrs.task_queue.name}"
    elif which == "marker_recorded_event_attributes":
        detail = attrs.marker_name
    elif which == "start_child_workflow_execution_initiated_event_attributes":
        detail = attrs.workflow_id
    elif which == "timer_started_event_attributes":
        detail = f"{attrs.start_to_fire_timeout.ToTimedelta().total_seconds():g}s"
    elif which == "workflow_execution_started_event_attributes":
        detail = attrs.workflow_type.name
    return name, detail


async def fetch_timeline(client: Client, job_id: str, t0: float, t_end: float) -> list[TimelineEvent]:
    """History events of the job, its task 0 and the scheduler between submit (`t0`) and `t_end`.

    Event times are the server's clock and `t0` the client's; both run on this host.
    """
    names = {job_id: "job", task_workflow_id(job_id, 0): "task", SCHEDULER_WORKFLOW_ID: "scheduler"}
    events: list[TimelineEvent] = []
    for workflow_id, label in names.items():
        try:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                continue  # e.g. a job that runs its task without a child workflow
            raise
        for event in history.events:
            at = event.event_time.seconds + event.event_time.nanos / 1e9
            if t0 - 0.01 <= at <= t_end + 0.01:
                kind, detail = describe_event(event)
                events.append(TimelineEvent(round((at - t0) * 1000, 1), label, event.event_id, kind, detail))
    events.sort(key=lambda e: (e.at_ms, e.workflow, e.event_id))
    return events


def count_workflow_tasks(events: Sequence[TimelineEvent], before_ms: float) -> dict[str, int]:
    """Workflow tasks completed per workflow before `before_ms` (the task's process start)."""
    counts: dict[str, int] = {}
    for e in events:
        if e.event == "WORKFLOW_TASK_COMPLETED" and e.at_ms <= before_ms:
            counts[e.workflow] = counts.get(e.workflow, 0) + 1
    return counts


# ---------------------------------------------------------------------------- the run


def code_version() -> str:
    """The commit of the code under test and how many files differ from it (other edits run too)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return f"{root} (not a git checkout)"
    return f"{root} at {head}" + (f" + {len(dirty)} modified files" if dirty else "")


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, load, versions, the code under test."""
    try:
        cli = subprocess.run(
            [str(temporal_binary()), "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        cli = f"unknown ({err})"
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "temporalio": temporalio.__version__,
        "temporal_cli": cli,
        "code": code_version(),
    }


def bench_config() -> ClusterConfig:
    """The bench fleet (see BENCH_FLEET)."""
    return parse_config(BENCH_FLEET, "iris.bench fleet")


async def run_bench(
    info: ClusterInfo,
    jobs: int,
    samples: int,
    timeline: bool = True,
    dynamic_config: Mapping[str, str] | None = None,
) -> BenchResult:
    """Measure raw and Iris against the running cluster `info` (started with `dynamic_config`)."""
    machine = machine_info()
    machine["dynamic_config"] = dict(dynamic_config or {})
    iris = await AsyncIrisClient.connect(info.address, store=info.store_url)
    client = iris.temporal
    pids = {"bench": os.getpid(), **info.pids}
    raw_latency, raw_done, raw_throughput = await measure_raw(client, samples, jobs, pids)
    iris_latency, iris_done, submit_call, iris_throughput, last = await measure_iris(iris, samples, jobs, pids)
    machine["loadavg_end"] = list(os.getloadavg())
    result = BenchResult(
        machine=machine,
        raw_latency=raw_latency,
        raw_latency_done=raw_done,
        raw_throughput=raw_throughput,
        iris_latency=iris_latency,
        iris_latency_done=iris_done,
        iris_submit_call=submit_call,
        iris_throughput=iris_throughput,
    )
    if timeline:
        job_id, t0, running, done = last
        events = await fetch_timeline(client, job_id, t0, done)
        running_ms = round((running - t0) * 1000, 1)
        events.append(TimelineEvent(running_ms, "process", 0, "TASK_PROCESS_STARTED", "date +%s.%N"))
        events.append(TimelineEvent(round((done - t0) * 1000, 1), "client", 0, "SUCCEEDED_OBSERVED"))
        events.sort(key=lambda e: (e.at_ms, e.workflow, e.event_id))
        result.timeline = events
        result.timeline_job = job_id
        result.timeline_running_ms = running_ms
        result.workflow_tasks_before_running = count_workflow_tasks(events, running_ms)
    return result


# ---------------------------------------------------------------------------- output


def _ms(seconds: float) -> str:
    """Seconds as whole milliseconds, e.g. `391 ms`."""
    return f"{seconds * 1000:.0f} ms"


def per_unit(counts: Mapping[str, int], units: int) -> str:
    """`counts` per unit: the total and, for several kinds, the split, e.g. `13.1 (job 5.0 + task 4.0 + ...)`."""
    if not counts:
        return ""
    total = f"{sum(counts.values()) / units:.1f}"
    if len(counts) == 1:
        return total
    return total + " (" + " + ".join(f"{k} {v / units:.1f}" for k, v in counts.items()) + ")"


def server_ms_per_workflow_task(figures: Throughput) -> float | None:
    """The dev server's CPU milliseconds per workflow task completed during a throughput run."""
    tasks = sum(figures.workflow_tasks.values())
    cpu = figures.cpu.get("temporal")
    return None if not tasks or cpu is None else cpu * 1000 / tasks


def format_report(result: BenchResult, show_timeline: bool = True) -> str:
    """The human-readable report: machine, the figures table, the targets, the timeline."""
    m = result.machine
    lines = [
        f"machine: nproc={m['nproc']} cpu_count={m['cpu_count']} "
        f"loadavg start={'/'.join(f'{x:.2f}' for x in m['loadavg_start'])} "
        f"end={'/'.join(f'{x:.2f}' for x in m.get('loadavg_end', m['loadavg_start']))}",
        f"         {m['platform']}, python {m['python']}, temporalio {m['temporalio']}",
        f"         {m['temporal_cli']}; code {m['code']}",
        f"         dev-server dynamic config beyond the defaults: {m.get('dynamic_config') or 'none'}",
        "",
    ]
    rows: list[tuple[str, str, str, str]] = [
        ("figure", "raw", "Iris", "ratio"),
        (
            "latency median (raw: start->activity; Iris: submit->running)",
            _ms(result.raw_latency.median),
            _ms(result.iris_latency.median),
            f"{result.latency_ratio:.1f}x",
        ),
        (
            "latency p90",
            _ms(result.raw_latency.p90),
            _ms(result.iris_latency.p90),
            f"{result.iris_latency.p90 / result.raw_latency.p90:.1f}x",
        ),
        (
            "done median (raw: start->result; Iris: submit->SUCCEEDED seen)",
            _ms(result.raw_latency_done.median),
            _ms(result.iris_latency_done.median),
            f"{result.iris_latency_done.median / result.raw_latency_done.median:.1f}x",
        ),
        (
            "done p90",
            _ms(result.raw_latency_done.p90),
            _ms(result.iris_latency_done.p90),
            f"{result.iris_latency_done.p90 / result.raw_latency_done.p90:.1f}x",
        ),
        ("Iris submit_command call median", "", _ms(result.iris_submit_call.median), ""),
        (
            f"throughput ({result.raw_throughput.count} wf / {result.iris_throughput.count} jobs at once)",
            f"{result.raw_throughput.rate:.1f}/s",
            f"{result.iris_throughput.rate:.1f}/s",
            f"{result.throughput_ratio:.0%}",
        ),
        (
            "  all accepted after / all done after",
            f"{result.raw_throughput.accepted:.2f} s / {result.raw_throughput.elapsed:.2f} s",
            f"{result.iris_throughput.accepted:.2f} s / {result.iris_throughput.elapsed:.2f} s",
            "",
        ),
    ]
    for label, attr in (("workflow tasks per job/wf", "workflow_tasks"), ("history events per job/wf", "events")):
        raw_counts, iris_counts = getattr(result.raw_throughput, attr), getattr(result.iris_throughput, attr)
        rows.append(
            (
                f"  {label}",
                per_unit(raw_counts, result.raw_throughput.count),
                per_unit(iris_counts, result.iris_throughput.count),
                "",
            )
        )
    raw_server = server_ms_per_workflow_task(result.raw_throughput)
    iris_server = server_ms_per_workflow_task(result.iris_throughput)
    if raw_server is not None and iris_server is not None:
        rows.append(("  temporal CPU ms per workflow task", f"{raw_server:.1f}", f"{iris_server:.1f}", ""))
    names = sorted((set(result.raw_throughput.cpu) | set(result.iris_throughput.cpu)) - {"wall", "machine busy"})
    for name in [*names, "machine busy"]:
        raw_cpu, iris_cpu = result.raw_throughput.cpu.get(name), result.iris_throughput.cpu.get(name)
        rows.append(
            (
                f"  CPU seconds in it: {name}",
                "" if raw_cpu is None else f"{raw_cpu:.1f}",
                "" if iris_cpu is None else f"{iris_cpu:.1f}",
                "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for n, row in enumerate(rows):
        lines.append(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}")
        if n == 0:
            lines.append("-" * (sum(widths) + 6))
    lines.append("")
    met = result.targets()
    lines.append(
        f"target: Iris submit->running median < {TARGET_LATENCY_SECONDS * 1000:.0f} ms: "
        f"{_ms(result.iris_latency.median)} -> "
        f"{'MET' if met['iris_submit_to_running_median_lt_0.5s'] else 'MISSED'}"
    )
    lines.append(
        f"target: Iris throughput >= {TARGET_THROUGHPUT_RATIO:.0%} of raw: {result.throughput_ratio:.0%} -> "
        f"{'MET' if met['iris_throughput_ge_40pct_raw'] else 'MISSED'}"
    )
    lines.append(f"samples: {len(result.raw_latency.samples)} sequential per side after {WARMUP_SAMPLES} warm-ups")
    if show_timeline and result.timeline:
        lines += [
            "",
            f"timeline of {result.timeline_job} (ms after the client's submit; server event times):",
        ]
        for e in result.timeline:
            detail = f"  {e.detail}" if e.detail else ""
            lines.append(f"  {e.at_ms:>8.1f}  {e.workflow:<9} #{e.event_id:<3} {e.event}{detail}")
        counts = ", ".join(f"{k} {v}" for k, v in sorted(result.workflow_tasks_before_running.items()))
        lines.append(
            f"workflow tasks completed before the process started ({result.timeline_running_ms:.0f} ms): "
            f"{counts} (total {sum(result.workflow_tasks_before_running.values())})"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m iris.bench",
        description="Iris latency and throughput vs the bare Temporal dev server, on one local cluster.",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=200,
        help="workflows (raw) and one-task jobs (Iris) started at once (default 200)",
    )
    parser.add_argument(
        "--latency-samples",
        type=int,
        default=20,
        help=f"sequential latency samples per side, after {WARMUP_SAMPLES} warm-ups (default 20)",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="cluster home (default: a temporary directory, removed afterwards)",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the figures here")
    parser.add_argument(
        "--no-timeline",
        action="store_true",
        help="skip the event timeline of one job on the submit-to-running path",
    )
    parser.add_argument(
        "--dynamic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra dev-server dynamic config (JSON value), e.g. history.transferProcessorMaxPollRPS=1000",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.latency_samples < 1:
        parser.error("--jobs and --latency-samples must be >= 1")
    try:
        args.dynamic_config = dict(parse_dynamic_config(item) for item in args.dynamic_config)
    except ValueError as err:
        parser.error(str(err))
    return args


def parse_dynamic_config(item: str) -> tuple[str, str]:
    """`KEY=VALUE` from the command line; VALUE must be JSON (`1000`, `true`, `"text"`)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--dynamic-config: expected KEY=VALUE, got {item!r}")
    try:
        json.loads(value)
    except ValueError:
        raise ValueError(f"--dynamic-config {key}: the value must be JSON, got {value!r}") from None
    return key.strip(), value


def _quiet_logging() -> None:
    """Only warnings from the local cluster's structlog output, on stderr, so the report stays readable."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while the bench runs, so the cluster is stopped either way."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Start the cluster, measure, print (and write `--json`), always stop the cluster; the exit code."""
    args = parse_args(argv)
    _quiet_logging()
    created = args.home is None
    home = Path(tempfile.mkdtemp(prefix="iris-bench-")) if created else args.home.expanduser().resolve()
    cluster = LocalCluster(home)
    existing = cluster.status()
    if existing is not None and existing.running:
        print(f"error: a local cluster already runs in {home}; use another --home", file=sys.stderr)
        return 2
    result: BenchResult | None = None
    try:
        with _sigterm_as_interrupt():
            started = time.monotonic()
            print(f"starting a local cluster in {home} ...", file=sys.stderr, flush=True)
            info = cluster.up(bench_config(), dynamic_config=args.dynamic_config or None)
            print(
                f"cluster up in {time.monotonic() - started:.1f} s at {info.address}; measuring ...",
                file=sys.stderr,
                flush=True,
            )
            result = asyncio.run(
                run_bench(info, args.jobs, args.latency_samples, not args.no_timeline, args.dynamic_config)
            )
    except KeyboardInterrupt:
        print("interrupted; stopping the cluster", file=sys.stderr)
        return 130
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        try:
            cluster.down()
            if created:
                shutil.rmtree(home, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, previous)
    print(format_report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        print(f"figures written to {args.json}")
    if args.check and not all(result.targets().values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
