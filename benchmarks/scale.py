"""`python -m benchmarks scale`: the singleton scheduler at fleet scale, against a real dev server.

Synthetic agents register `--workers` hosts (one liveness session per agent
process serving `--hosts-per-agent` of them, heartbeating every second) and
`--pending` tasks are enqueued in jobs of `--tasks-per-job`, as JobWorkflows
would. The real scheduler (scale_controller, its own process) places them;
signals to the absent task workflows are counted, not sent. Then one agent
stops beating, to show its hosts are reported lost. Figures come from the
scheduler's own histories; the exit code is 1 when a Temporal limit was hit or
work was left unplaced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from temporalio import activity
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.contracts import SCHEDULER_WORKFLOW_ID, WORKER_SESSION, WorkerSessionInput
from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_attr
from activities.signals import coalescer
from benchmarks.replays import replay_all
from benchmarks.repo import REPO
from iris.connection import connect_client
from iris.local.cluster import free_port, temporal_binary, temporal_command
from iris.local.processes import port_open
from iris.query_retry import LOOKAHEAD_REFUSED
from worker_agent.registration import register_hosts
from workflows.messages import Enqueue, SchedulingSpec

AGENT_QUEUE = "iris-bench-agents"
PAYLOAD_LIMIT = 2 * 1024 * 1024  # Temporal's default blob size error limit
HISTORY_EVENT_LIMIT = 51_200
HOST_CPU_MILLIS = 8_000
TASK_CPU_MILLIS = 500  # 16 tasks fit a host: 10,000 hosts hold 160,000
CONCURRENCY = 64  # registrations in flight
ENQUEUE_SENDERS = 64  # enqueues in flight (the --enqueue-senders default): each is one job starting
TIMINGS_FILE = "activations.json"  # the controller's CPU time per scheduler activation (activation_timing)


SPAN_SLACK = 0.005  # s: the server's and the controller's clocks are the machine's, read a moment apart


@dataclass
class ScaleFigures:
    workers: int
    pending: int
    agents: int
    register_seconds: float = 0.0
    enqueue_seconds: float = 0.0
    place_seconds: float = 0.0
    placed: int = 0
    passes: int = 0
    local_passes: int = 0
    pass_seconds_median: float = 0.0
    pass_seconds_max: float = 0.0
    runs: int = 0
    continue_as_new_bytes: list[int] = field(default_factory=list)
    events_total: int = 0
    events_max_run: int = 0
    largest_payload: int = 0
    failed_workflow_tasks: list[str] = field(default_factory=list)
    force_closed_tasks: int = 0
    unhandled_command_tasks: int = 0
    lookahead_evictions: int = 0
    refused_signals: int = 0
    controller_peak_rss_mb: float = 0.0
    pass_process_peak_rss_mb: float = 0.0  # the controller's child processes (its scheduling pass's)
    # Workflow task durations (started -> completed, server times) of every scheduler run; the target is
    # <= 200 ms at 10,000 workers x 100,000 pending (the deadlock detector fires at 2 s).
    workflow_task_seconds: list[float] = field(default_factory=list)
    longest_workflow_task: str = ""  # which one: its run's event number, and whether it began the run
    # The longest workflow tasks by what they did (the commands they completed with): [ms, label, run id, started
    # and completed (server times, s)].
    longest_workflow_tasks: list[list[Any]] = field(default_factory=list)
    lost_detect_seconds: float | None = None
    # The scheduler's own code per activation, measured in the controller (benchmarks.activation_timing):
    # {"activations": n, "top": [[cpu ms, wall ms, what], ...]}, longest CPU first.
    scheduler_activations: dict[str, Any] = field(default_factory=dict)
    limits_hit: list[str] = field(default_factory=list)
    replayed_runs: int = 0  # the scheduler's runs replayed on the current code (benchmarks.replays)
    replay_failures: list[str] = field(default_factory=list)

    def report(self) -> str:
        cans = self.continue_as_new_bytes
        lines = [
            f"scheduler scale: {self.workers} workers ({self.agents} agent sessions), {self.pending} pending tasks",
            f"  register all workers   {self.register_seconds:8.1f} s",
            f"  enqueue all tasks      {self.enqueue_seconds:8.1f} s",
            f"  place all tasks        {self.place_seconds:8.1f} s  ({self.placed}/{self.pending} placed)",
            f"  scheduling passes      {self.passes:8d}     ({self.local_passes} small ones as local activities)",
            f"  big pass time          {self.pass_seconds_median:8.2f} s median, {self.pass_seconds_max:.2f} s max"
            " (scheduling activity scheduled -> completed)",
            f"  scheduler runs         {self.runs:8d}     continue-as-new input: "
            + (f"max {max(cans) / 1024:.0f} KiB, last {cans[-1] / 1024:.0f} KiB" if cans else "none"),
            f"  history events         {self.events_total:8d}     max per run {self.events_max_run},"
            f" per pass {self.events_total / max(1, self.passes):.1f},"
            f" per task {self.events_total / max(1, self.pending):.3f},"
            f" per host {self.events_total / max(1, self.workers):.3f}",
            f"  largest payload        {self.largest_payload / 1024:8.0f} KiB (limit {PAYLOAD_LIMIT // 1024} KiB)",
            f"  controller peak RSS    {self.controller_peak_rss_mb:8.0f} MB"
            f"  (+ {self.pass_process_peak_rss_mb:.0f} MB in its scheduling pass's process)",
            self._workflow_tasks_line(),
            *self._activation_lines(),
            f"  force-closed tasks     {self.force_closed_tasks:8d}     (server flushed >100 buffered signals;"
            " the task is retried, nothing is lost)",
            f"  closing tasks redone   {self.unhandled_command_tasks:8d}     (signals came in as a run continued"
            " as new; it took them first)",
            f"  look-ahead evictions   {self.lookahead_evictions:8d}     (a query looked ahead on a controller:"
            " its run was replayed, iris/controller/lookahead_guard.py)",
            f"  enqueues refused       {self.refused_signals:8d}     (sent again, as a job's enqueue activity does)",
            "  agent lost -> hosts unhealthy "
            + (f"{self.lost_detect_seconds:.1f} s" if self.lost_detect_seconds is not None else "not seen"),
            "  limits hit: " + ("; ".join(self.limits_hit) if self.limits_hit else "none"),
            f"  history replays        {self.replayed_runs:8d}     scheduler runs replayed on the current code, "
            f"{len(self.replay_failures)} failed" + "".join(f"\n    {f}" for f in self.replay_failures[:5]),
        ]
        return "\n".join(lines)

    def _activation_lines(self) -> list[str]:
        return _activation_lines_of(self.scheduler_activations)

    def _workflow_tasks_line(self) -> str:
        durations = sorted(self.workflow_task_seconds)
        if not durations:
            return "  longest workflow task       none seen"
        p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
        return (
            f"  longest workflow task  {durations[-1] * 1000:8.0f} ms  ({self.longest_workflow_task}; median"
            f" {durations[len(durations) // 2] * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms over {len(durations)};"
            " target <= 200 ms)\n"
            + "\n".join(f"    {row[0]:8.0f} ms  {row[1]}{self._split(row)}" for row in self.longest_workflow_tasks)
        )

    def _split(self, row: list[Any]) -> str:
        """Where a long task's time went: the scheduler's code (its activations in the task's window, measured in
        the controller) and the wait before and after it (the server's and the SDK's side, and the machine)."""
        if "spans" not in self.scheduler_activations:
            return ""
        run_id, began, ended = row[2], row[3], row[4]
        inside = [s for s in self.scheduler_activations["spans"]
                  if s[0] == run_id and s[1] >= began - SPAN_SLACK and s[2] <= ended + SPAN_SLACK]  # fmt: skip
        if not inside:
            return "\n                 (no activation of it seen in the controller)"
        code = sum(s[2] - s[1] for s in inside) * 1000
        before, after = (inside[0][1] - began) * 1000, (ended - inside[-1][2]) * 1000
        others = self.scheduler_activations.get("others", [])
        busy = _overlap([o[:2] for o in others if not o[2]], began, inside[0][1])  # [start, end, type if a new run]
        made = _overlap([o[:2] for o in others if o[2]], began, inside[0][1])
        # An earlier run's activations (its eviction from the cache, once it continued as new, runs its teardown).
        earlier = _overlap([s[1:3] for s in self.scheduler_activations["spans"] if s[0] != run_id], began, inside[0][1])
        return (f"\n                 (the scheduler's code {code:.0f} ms, {sum(s[3] for s in inside):.0f} ms of CPU;"
                f" before it {max(0.0, before):.0f} ms, after it {max(0.0, after):.0f} ms;"
                f" other workflows' code before it {busy[1]:.0f} ms in {busy[0]} activations"
                + (f" and {made[1]:.0f} ms making {made[0]} new runs" if made[0] else "")
                + (f", another scheduler run's {earlier[1]:.0f} ms" if earlier[0] else "") + ")")  # fmt: skip


def _overlap(spans: list[list[float]], began: float, ended: float) -> tuple[int, float]:
    """How many of `spans` ([start, end] wall-clock seconds) overlap [began, ended], and for how many ms in all (the
    controller's threads share one interpreter: time another workflow's code ran there is time the wait can hold)."""
    inside = [min(end, ended) - max(start, began) for start, end in spans if start < ended and end > began]
    return len(inside), sum(inside) * 1000


def _activation_lines_of(timings: dict[str, Any]) -> list[str]:
    top = timings.get("top") or []
    if not top:
        return ["  scheduler activations       not measured"]
    lines = [f"  longest activation CPU {top[0][0]:8.0f} ms  (the scheduler's own code, in the controller, over"
             f" {timings.get('activations', 0)} activations; wall time beside)"]  # fmt: skip
    lines += [f"    {cpu:8.0f} ms CPU {wall:6.0f} ms wall  {what}" for cpu, wall, what in top]
    replays, replay_ms = timings.get("replays", 0), timings.get("replay_cpu_ms", 0)
    lines.append(f"  runs replayed in full   {replays:5d}     ({replay_ms} ms of CPU; a run replayed from its first"
                 " event in the controller)")  # fmt: skip
    lines.append(f"  closed runs refused     {timings.get('closed_refusals', 0):5d}     (a query that reached a run"
                 " after it continued as new, asked again of the current run: iris/controller/closed_run_guard.py)")
    return lines


def _task_label(events: list[Any], index: int) -> str:
    """What a completed workflow task did, from the commands recorded right after it."""
    did = []
    for event in events[index + 1 :]:
        if event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        ):
            break
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            did.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            did.append("continue-as-new")  # a large state was packed in the task before, which set a timer
        elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            did.append("timer")
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            did.append("local activity")
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            did.append("memo")
    signals = 0
    for event in reversed(events[:index]):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break
        signals += event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    first = "the run's first (loads the carried state); " if events[index].event_id <= 4 else ""
    return f"{first}{signals} signals in; then {', '.join(did) or 'nothing'}"


def host_metadata(index: int, session: str) -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(worker_id=f"bench-{index:05d}", runtime="process", host="bench", agent_session=session)
    meta.capacity.cpu_millis = HOST_CPU_MILLIS
    meta.capacity.memory_bytes = 32 << 30
    for key, value in {"pool": "bench", "zone": f"zone-{index % 4}"}.items():
        set_attr(meta.attributes[key], value)
    return meta


class SyntheticAgents:
    """Many agent sessions in one process: each heartbeats for its hosts until told to go quiet."""

    def __init__(self) -> None:
        self.quiet: set[str] = set()

    @activity.defn(name=WORKER_SESSION)
    async def worker_session(self, session: WorkerSessionInput) -> None:
        while True:
            if session.session not in self.quiet:
                activity.heartbeat()
            await asyncio.sleep(1.0)


def controller_peak_rss_mb(pid: int) -> float:
    """VmHWM of the controller process (Linux), in MB."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children_peak_rss_mb(pid: int) -> float:
    """VmHWM of the controller's child processes (the process big scheduling passes run in), in MB."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0.0
    return sum(controller_peak_rss_mb(child.pid) for child in children)


async def _gather_limited(coros: Sequence[Any], limit: int = CONCURRENCY) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def _summary(client: Client) -> pb.ClusterSummary:
    """The scheduler's counts; a busy dev server sometimes drops a query, and on a loaded machine the run's
    replay for a query can pass the SDK's 2 s deadlock limit, so ask again for up to 60 s."""
    for attempt in range(60):
        try:
            return await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query(
                "summary", result_type=pb.ClusterSummary
            )
        except (RPCError, WorkflowQueryFailedError):
            if attempt == 59:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


class SchedulerClosedError(Exception):
    """The scheduler's workflow ended other than by continuing as new (terminated by the server, failed): the
    bench's waits would otherwise go on until their deadline, with nothing left to answer them."""


async def _check_scheduler(client: Client) -> None:
    """SchedulerClosedError naming how, if the scheduler's latest run closed (a run that continued as new is followed
    by the next, which describe finds)."""
    desc = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).describe()
    if desc.status not in (None, WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
        raise SchedulerClosedError(f"the scheduler's workflow closed: {desc.status.name}")


def _payload_sizes(obj: Any) -> list[int]:
    """Sizes of every Payload inside a history event (walks the proto)."""
    sizes = []
    for desc, value in obj.ListFields():
        if desc.message_type is None:
            continue
        if hasattr(value, "ListFields"):
            items = [value]
        else:
            items = list(value.values()) if desc.message_type.GetOptions().map_entry else list(value)
        for item in items:
            if not hasattr(item, "ListFields"):  # a map of scalars
                continue
            if item.DESCRIPTOR.full_name == "temporal.api.common.v1.Payload":
                sizes.append(len(item.data))
            else:
                sizes.extend(_payload_sizes(item))
    return sizes


async def read_histories(client: Client, figures: ScaleFigures) -> None:
    """Passes, pass times, events, continue-as-new sizes and failures from every scheduler run."""
    pass_times: list[float] = []
    local_passes = 0
    async for wf in client.list_workflows(f"WorkflowId = '{SCHEDULER_WORKFLOW_ID}'"):
        figures.runs += 1
        if wf.status not in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
            figures.limits_hit.append(f"scheduler run {wf.run_id} ended {wf.status}")
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        events = list(history.events)
        figures.events_total += len(events)
        figures.events_max_run = max(figures.events_max_run, len(events))
        scheduled: dict[int, float] = {}  # find_assignments activities by their scheduled event
        task_started: dict[int, float] = {}  # workflow tasks by their started event
        for index, event in enumerate(events):
            figures.largest_payload = max([figures.largest_payload, *_payload_sizes(event)])
            at = event.event_time.ToDatetime().timestamp()
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                task_started[event.event_id] = at
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                began = task_started.pop(event.workflow_task_completed_event_attributes.started_event_id, None)
                if began is not None:
                    took = at - began
                    if not figures.workflow_task_seconds or took > max(figures.workflow_task_seconds):
                        first = " (the run's first: it unpacks the carried state)" if event.event_id <= 4 else ""
                        figures.longest_workflow_task = f"run {wf.run_id[:8]} event {event.event_id}{first}"
                    figures.workflow_task_seconds.append(took)
                    tops = figures.longest_workflow_tasks
                    if len(tops) < 8 or took * 1000 > tops[-1][0]:
                        label = f"run {wf.run_id[:8]} event {event.event_id}: {_task_label(events, index)}"
                        tops.append([round(took * 1000), label, wf.run_id, began, at])
                        tops.sort(key=lambda row: -row[0])
                        del tops[8:]
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attrs = event.workflow_task_failed_event_attributes
                cause = WorkflowTaskFailedCause.Name(attrs.cause).removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
                if cause == "FORCE_CLOSE_COMMAND":  # more than 100 signals buffered during one task
                    figures.force_closed_tasks += 1
                    continue
                if cause == "UNHANDLED_COMMAND":  # signals came in as the run closed: it goes on with them
                    figures.unhandled_command_tasks += 1
                    continue
                if attrs.failure.message.startswith(LOOKAHEAD_REFUSED):  # evicted and replayed, by design
                    figures.lookahead_evictions += 1
                    continue
                figures.failed_workflow_tasks.append(
                    f"event {event.event_id} of {len(events)}: {cause} {attrs.failure.message[:200]}".strip()
                )
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                data = event.marker_recorded_event_attributes.details.get("data")
                if data is not None and any(b"find_assignments" in p.data for p in data.payloads):
                    local_passes += 1  # a small pass, run as a local activity: no duration recorded
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                if event.activity_task_scheduled_event_attributes.activity_type.name == "find_assignments":
                    scheduled[event.event_id] = at
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                begun = scheduled.pop(event.activity_task_completed_event_attributes.scheduled_event_id, None)
                if begun is not None:
                    pass_times.append(at - begun)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                carried = event.workflow_execution_continued_as_new_event_attributes.input.payloads
                figures.continue_as_new_bytes.append(sum(len(p.data) for p in carried))
    figures.passes = len(pass_times) + local_passes
    figures.local_passes = local_passes
    if pass_times:
        pass_times.sort()
        figures.pass_seconds_median = pass_times[len(pass_times) // 2]
        figures.pass_seconds_max = pass_times[-1]
    if figures.largest_payload > PAYLOAD_LIMIT:
        figures.limits_hit.append(f"a payload of {figures.largest_payload} bytes (limit {PAYLOAD_LIMIT})")
    if figures.events_max_run > HISTORY_EVENT_LIMIT:
        figures.limits_hit.append(f"a scheduler run of {figures.events_max_run} events (limit {HISTORY_EVENT_LIMIT})")
    if figures.failed_workflow_tasks:
        figures.limits_hit.append(
            f"{len(figures.failed_workflow_tasks)} failed workflow tasks, first: {figures.failed_workflow_tasks[0]}"
        )


async def save_histories(client: Client, out: Path) -> None:
    """Every scheduler run's history and one WorkerWorkflow's, in tests/histories' fixture format."""
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before any await
    query = f"WorkflowId = '{SCHEDULER_WORKFLOW_ID}' OR WorkflowType = 'WorkerWorkflow'"
    seen: dict[str, int] = {}
    async for wf in client.list_workflows(query):
        status = wf.status.name.lower() if wf.status else "unknown"
        kind = f"{wf.workflow_type}-{status.replace('_', '')}"
        seen[kind] = seen.get(kind, 0) + 1
        if wf.workflow_type == "WorkerWorkflow" and seen[kind] > 1:
            continue
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        fixture = {"workflow_id": wf.id, "history": json.loads(history.to_json())}
        (out / f"{kind}-scale-{seen[kind]}.json").write_text(json.dumps(fixture))



def start_bench_controller(address: str, home: Path) -> subprocess.Popen[bytes] | None:
    """The bench's controller (`benchmarks.scale_controller`), once it says ready; None (reported) if it does not."""
    controller = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scale_controller", address, str(home / TIMINGS_FILE)],
        stdout=subprocess.PIPE,
        stderr=(home / "controller.log").open("wb"), start_new_session=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert controller.stdout is not None
    line = b"-"
    while line and line.strip() != b"ready":  # its log lines (e.g. the deployment's promotion) come first
        line = controller.stdout.readline()
    if line.strip() != b"ready":
        print(f"error: the bench controller did not start; see {home / 'controller.log'}", file=sys.stderr)
        return None
    return controller

async def run_scale(
    client: Client,
    controller_pid: int,
    workers: int,
    pending: int,
    hosts_per_agent: int,
    tasks_per_job: int,
    timeout: float,
    enqueue_senders: int = ENQUEUE_SENDERS,
) -> ScaleFigures:
    agents = SyntheticAgents()
    sessions = [
        WorkerSessionInput(
            f"bench-{start:05d}",
            f"bench-session-{start}",
            announced=True,
            more_worker_ids=[f"bench-{i:05d}" for i in range(start + 1, min(workers, start + hosts_per_agent))],
            task_queue=AGENT_QUEUE,
        )
        for start in range(0, workers, hosts_per_agent)
    ]
    figures = ScaleFigures(workers=workers, pending=pending, agents=len(sessions))
    deadline = time.monotonic() + timeout
    async with Worker(
        client,
        task_queue=AGENT_QUEUE,
        activities=[agents.worker_session],
        max_concurrent_activities=len(sessions) + 10,
    ):
        started = time.monotonic()

        async def register(session: WorkerSessionInput) -> dict[str, str]:
            first = int(session.worker_id.split("-")[1])
            hosts = [host_metadata(first + i, session.session) for i in range(1 + len(session.more_worker_ids))]
            return await register_hosts(client, session, hosts, timeout=max(30.0, deadline - time.monotonic())) or {}

        refused = [r for r in await _gather_limited([register(s) for s in sessions]) if r]
        if refused:
            figures.limits_hit.append(f"{len(refused)} agents had hosts refused, e.g. {refused[0]}")
        try:  # a scheduler closed for good (terminated by the server for a limit) ends every wait below
            while (await _summary(client)).healthy_workers < workers and time.monotonic() < deadline:
                await _check_scheduler(client)
                await asyncio.sleep(0.5)
            figures.register_seconds = time.monotonic() - started

            started = time.monotonic()
            spec = SchedulingSpec(cpu_millis=TASK_CPU_MILLIS, memory_bytes=1 << 30)
            jobs = [
                (f"bench-job-{j:06d}", min(tasks_per_job, pending - j * tasks_per_job))
                for j in range((pending + tasks_per_job - 1) // tasks_per_job)
            ]
            refusals: list[str] = []

            async def enqueue(job_id: str, n: int) -> None:
                """One job's enqueue, coalesced as a controller's are; refused, sent again (as a job's would be)."""
                request = Enqueue(job_id, spec, dict.fromkeys(range(n), 0), time.time())
                for pause in (0.2, 0.5, 1.0, 2.0, *[5.0] * 60):
                    try:
                        await coalescer(client, SCHEDULER_WORKFLOW_ID).send(request)  # as deliver_signals sends it
                        return
                    except RPCError as err:  # e.g. the server's per-run signal limit
                        refusals.append(str(err))
                        await _check_scheduler(client)  # a closed scheduler refuses for good: no five minutes per job
                        await asyncio.sleep(pause)
                raise RuntimeError(f"enqueue of {job_id} refused for 5 minutes: {refusals[-1]}")

            try:
                await _gather_limited([enqueue(job_id, n) for job_id, n in jobs], limit=enqueue_senders)
            except RuntimeError as err:
                figures.limits_hit.append(str(err))
            figures.refused_signals = len(refusals)
            if refusals:  # the server protected a limit: reported as a limit hit, though nothing was lost
                figures.limits_hit.append(f"{len(refusals)} enqueues refused by the server, e.g. {refusals[0]}")
            figures.enqueue_seconds = time.monotonic() - started
            try:
                await _place_and_lose_one(client, figures, agents, sessions, pending, started, deadline, timeout)
            except RPCError as err:  # e.g. the scheduler's workflow task keeps failing: reported, not a crash
                figures.limits_hit.append(f"the scheduler stopped answering: {err}")
        except SchedulerClosedError as err:  # reported as a limit hit; the histories still say what happened
            figures.limits_hit.append(str(err))
    figures.controller_peak_rss_mb = controller_peak_rss_mb(controller_pid)
    figures.pass_process_peak_rss_mb = children_peak_rss_mb(controller_pid)
    await read_histories(client, figures)
    replays = await replay_all(client, types=("SchedulerWorkflow",), limit=100)  # every run, not a quiet one
    figures.replayed_runs, figures.replay_failures = replays.replayed, replays.failures
    return figures


async def _place_and_lose_one(
    client: Client,
    figures: ScaleFigures,
    agents: SyntheticAgents,
    sessions: list[WorkerSessionInput],
    pending: int,
    started: float,
    deadline: float,
    timeout: float,
) -> None:
    """Wait until every task is placed, then stop one agent's beats and time its hosts' loss."""
    while time.monotonic() < deadline:
        summary = await _summary(client)
        figures.placed = summary.running_tasks
        if summary.pending_tasks == 0 and summary.running_tasks >= pending:
            break
        await _check_scheduler(client)
        await asyncio.sleep(1.0)
    figures.place_seconds = time.monotonic() - started
    if figures.placed < pending:
        figures.limits_hit.append(f"{pending - figures.placed} tasks left unplaced after {timeout:.0f} s")

    # Liveness: one agent goes quiet; all its hosts must be reported lost (heartbeat timeout 6 s).
    quiet = sessions[-1]
    before = (await _summary(client)).healthy_workers
    agents.quiet.add(quiet.session)
    started = time.monotonic()
    while time.monotonic() < min(deadline + 60, started + 60):
        if (await _summary(client)).healthy_workers <= before - 1 - len(quiet.more_worker_ids):
            figures.lost_detect_seconds = time.monotonic() - started
            break
        await _check_scheduler(client)
        await asyncio.sleep(0.5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000, help="synthetic worker hosts (default 1000)")
    parser.add_argument("--pending", type=int, default=10000, help="tasks enqueued at once (default 10000)")
    parser.add_argument("--hosts-per-agent", type=int, default=100, help="hosts per liveness session (default 100)")
    parser.add_argument("--tasks-per-job", type=int, default=10, help="tasks per enqueued job (default 10)")
    parser.add_argument(
        "--enqueue-senders", type=int, default=ENQUEUE_SENDERS,
        help=f"job enqueues in flight at once (default {ENQUEUE_SENDERS}; each is one job starting)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=840.0, help="give up placing after this many s (840)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the figures here")
    parser.add_argument(
        "--continue-as-new-events",
        type=int,
        default=0,
        metavar="N",
        help="have the server suggest continue-as-new after N events (default: its own limit)",
    )
    parser.add_argument(
        "--save-histories",
        type=Path,
        default=None,
        metavar="DIR",
        help="write every scheduler run's history (and one WorkerWorkflow's) there, as replay fixtures",
    )
    args = parser.parse_args(argv)
    for name in ("workers", "pending", "hosts_per_agent", "tasks_per_job"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.pending > args.workers * (HOST_CPU_MILLIS // TASK_CPU_MILLIS):
        parser.error(f"--pending: at most {HOST_CPU_MILLIS // TASK_CPU_MILLIS} tasks per worker fit")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="iris-scale-"))
    port = free_port()
    dynamic = {"limit.historyCount.suggestContinueAsNew": str(args.continue_as_new_events)}
    argv_server = temporal_command(
        binary=temporal_binary(),
        port=port,
        ui_port=free_port(),
        db_path=home / "temporal.db",
        dynamic_config=dynamic if args.continue_as_new_events else None,
    )
    server_log = (home / "temporal.log").open("wb")
    server = subprocess.Popen(argv_server, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
    controller: subprocess.Popen[bytes] | None = None
    clean = False
    try:
        deadline = time.monotonic() + 60
        while not port_open(port):
            if server.poll() is not None or time.monotonic() > deadline:
                print(f"error: the dev server did not start; see {home / 'temporal.log'}", file=sys.stderr)
                return 2
            time.sleep(0.2)
        address = f"127.0.0.1:{port}"
        controller = start_bench_controller(address, home)
        if controller is None:
            return 2

        async def go() -> ScaleFigures:
            client = await connect_client(address)
            assert controller is not None
            figures = await run_scale(
                client,
                controller.pid,
                args.workers,
                args.pending,
                args.hosts_per_agent,
                args.tasks_per_job,
                args.timeout,
                args.enqueue_senders,
            )
            if args.save_histories is not None:
                await save_histories(client, args.save_histories)
            return figures

        figures = asyncio.run(go())
        clean = not figures.limits_hit
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if controller is not None:
            _stop(controller)
            with contextlib.suppress(OSError, ValueError, NameError):
                figures.scheduler_activations = json.loads((home / TIMINGS_FILE).read_text())
        _stop(server)
        server_log.close()
        if clean:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"logs kept in {home}", file=sys.stderr)
    print(figures.report())
    if args.json is not None:
        args.json.write_text(json.dumps(figures.__dict__, indent=2) + "\n")
    return 1 if figures.limits_hit else 0


if __name__ == "__main__":
    sys.exit(main())
