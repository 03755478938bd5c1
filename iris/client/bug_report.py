"""`iris job bug-report JOB`: everything someone needs to file an issue about a job, in one Markdown file.

Why Markdown and not a tarball: every part (request, status, errors, log tails, workers, workflow
histories) is text, so one `.md` file can be pasted into an issue or attached as is, read in a
browser or an editor without unpacking, and grepped; a tarball must be downloaded and unpacked
before anyone can see what it holds. The file stays bounded: log tails, events per history and the
number of tasks shown in detail are capped (the caps are said where they cut). Environment values
are left out (only the names); the log tails are the task's own output, so it says to review
it before sharing.

Histories are rendered one event per line (id, time, offset from the start, type, the detail that
matters: activity, signal, timer, failure message); the full JSON of any run is one
`temporal workflow show --output json -w ID` away, and the workflow and run ids are given.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import Message
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError

from activities.contracts import task_workflow_id
from iris.client.async_client import AsyncIrisClient
from iris.types import JobStatus, TaskState, WorkerStatus
from iris.units import format_memory
from worker_agent.storage import last_lines

LOG_TAIL_LINES = 50
"""Lines of each detailed task's log."""
DETAILED_TASKS = 20
"""Tasks shown in detail (log tail, history): the ones that did not succeed first, then task 0."""
AGENT_LOG_LINES = 20
"""Lines of each worker's own log that mention the job."""
HISTORY_HEAD, HISTORY_TAIL = 100, 300
"""Events of a longer history kept from its start and its end."""
_WORKER_QUEUE = re.compile(r"^iris-worker-(?P<worker>.+?)(-session-.*)?$")


@dataclass
class History:
    workflow_id: str
    run_id: str
    events: list[HistoryEvent]
    error: str = ""


def fenced(text: str, lang: str = "") -> str:
    """A code block that no run of backticks inside `text` can close early."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}"


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _utc(ts: float | None) -> str:
    return "—" if not ts else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _event_type(event: HistoryEvent) -> str:
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    return "".join(part.capitalize() for part in name.split("_"))


def _field(message: Message, *path: str) -> Any:
    """`message.a.b` when every step is set, else None (protobuf returns defaults for unset fields)."""
    value: Any = message
    for name in path:
        if not isinstance(value, Message) or name not in value.DESCRIPTOR.fields_by_name:
            return None
        if value.DESCRIPTOR.fields_by_name[name].message_type is not None and not value.HasField(name):
            return None
        value = getattr(value, name)
    return value or None


def event_detail(event: HistoryEvent) -> str:
    """The one thing worth reading about an event: what ran, what was sent, what failed and why."""
    which = event.WhichOneof("attributes")
    if which is None or (which.startswith("workflow_task_") and which != "workflow_task_failed_event_attributes"):
        return ""  # a workflow task's queue and worker identity say nothing about the job
    attrs = getattr(event, which)
    parts = []
    for label, path in (
        ("", ("workflow_type", "name")), ("", ("activity_type", "name")), ("queue", ("task_queue", "name")),
        ("signal", ("signal_name",)), ("marker", ("marker_name",)), ("id", ("workflow_id",)),
        ("child", ("workflow_execution", "workflow_id")), ("timer", ("start_to_fire_timeout",)),
        ("cause", ("cause",)), ("timeout", ("timeout_type",)), ("reason", ("reason",)),
        ("failure", ("failure", "message")), ("cause", ("failure", "cause", "message")),
    ):
        value = _field(attrs, *path)
        if value is None:
            continue
        if hasattr(value, "ToTimedelta"):
            value = f"{value.ToTimedelta().total_seconds():g}s"
        elif path[-1] in ("cause", "timeout_type") and isinstance(value, int):
            continue  # an enum number says nothing; the failure message says it in words
        parts.append(f"{label}={_cell(value)}" if label else _cell(value))
    return " ".join(parts)


def render_history(history: History) -> str:
    """One line per event (the middle of a long history left out, and said so)."""
    if history.error:
        return f"(not available: {history.error})"
    events = history.events
    if not events:
        return "(no events)"
    start = events[0].event_time.ToDatetime(UTC).timestamp()
    shown: Iterable[HistoryEvent | None] = events
    if len(events) > HISTORY_HEAD + HISTORY_TAIL:
        shown = [*events[:HISTORY_HEAD], None, *events[-HISTORY_TAIL:]]
    lines = []
    for event in shown:
        if event is None:
            lines.append(f"… {len(events) - HISTORY_HEAD - HISTORY_TAIL} events left out …")
            continue
        at = event.event_time.ToDatetime(UTC)
        offset = at.timestamp() - start
        lines.append(f"{event.event_id:>5}  {at:%H:%M:%S.%f}"[:-3] + f"  +{offset:8.3f}s  {_event_type(event)}"
                     + (f"  {event_detail(event)}" if event_detail(event) else ""))  # fmt: skip
    return fenced("\n".join(lines), "text")


async def fetch_history(client: Client, workflow_id: str) -> History:
    handle = client.get_workflow_handle(workflow_id)
    try:
        history = await handle.fetch_history()
    except RPCError as err:
        return History(workflow_id, "", [], err.message or str(err))
    return History(workflow_id, history.run_id, list(history.events))


def workers_of(histories: Sequence[History]) -> dict[str, list[str]]:
    """Worker id -> the task workflows that ran an activity on its queues (every attempt, not only the last)."""
    found: dict[str, list[str]] = {}
    for history in histories:
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                queue = event.activity_task_scheduled_event_attributes.task_queue.name
                match = _WORKER_QUEUE.match(queue)
                if match and history.workflow_id not in found.setdefault(match["worker"], []):
                    found[match["worker"]].append(history.workflow_id)
    return found


def _detailed(status: JobStatus) -> list[int]:
    unfinished = [t.task_index for t in status.tasks if t.state != TaskState.SUCCEEDED]
    first = [0] if status.num_tasks and 0 not in unfinished else []
    return sorted((unfinished + first)[:DETAILED_TASKS])


def _status_section(status: JobStatus) -> list[str]:
    out = ["## Status", "", f"**{status.state}** — {status.num_tasks} tasks; submitted {_utc(status.submitted_at)}, "
           f"finished {_utc(status.finished_at)}"]  # fmt: skip
    if status.error:
        out += ["", f"**Error:** {_cell(status.error)}"]
    if status.pending_reason:
        out += ["", f"**Waiting:** {_cell(status.pending_reason)}"]
    out += ["", "| Task | State | Attempt | Failures | Preemptions | Worker | Exit | Error |", "|---" * 8 + "|"]
    out += [f"| {t.task_index} | {t.state} | {t.attempt} | {t.failure_count} | {t.preemption_count} | "
            f"{_cell(t.worker_id) or '—'} | {'—' if t.exit_code is None else t.exit_code} | {_cell(t.error)} |"
            for t in status.tasks]  # fmt: skip
    return out


def _workers_section(client: AsyncIrisClient, status: JobStatus, involved: dict[str, list[str]],
                     live: dict[str, WorkerStatus]) -> list[str]:  # fmt: skip
    from iris.controller import daemon_logs
    out = ["## Workers", ""]
    if not involved:
        return [*out, "No task of this job was dispatched to a worker."]
    out += ["| Worker | Ran | Now | CPU | Memory | Running tasks | Attributes |", "|---|---|---|---|---|---|---|"]
    for worker_id, runs in sorted(involved.items()):
        ran = ", ".join(r.rsplit("/", 1)[-1] for r in runs)
        w = live.get(worker_id)
        if w is None:
            out.append(f"| {_cell(worker_id)} | {ran} | not registered now | | | | |")
            continue
        attrs = " ".join(f"{k}={v}" for k, v in sorted(w.attributes.items()))
        out.append(f"| {_cell(worker_id)} | {ran} | {'healthy' if w.healthy else 'UNHEALTHY'} | {w.cpu:g} | "
                   f"{format_memory(w.memory_bytes)} | {len(w.running_tasks)} | {_cell(attrs)} |")  # fmt: skip
    logs = daemon_logs.daemon_log_store(client.store_url, "worker")
    known = set(daemon_logs.daemon_ids(client.store_url, "worker"))
    for worker_id in sorted(involved):
        if worker_id not in known:
            continue
        cursor = logs.cursor_since(worker_id, 0, status.submitted_at - 1)
        data, _ = logs.read_new_bytes(worker_id, 0, cursor, final=True)
        mentions = [line for line in data.decode("utf-8", "replace").splitlines() if status.job_id in line]
        if mentions:
            out += ["", f"### {worker_id}: its own log about this job (last {AGENT_LOG_LINES} lines)", "",
                    fenced("\n".join(mentions[-AGENT_LOG_LINES:]), "json")]  # fmt: skip
    return out


async def report(client: AsyncIrisClient, job_id: str, *, team_mode: bool = False) -> str:
    """The report's Markdown text, from a client holding a Temporal connection: the CLI's, or in team mode the
    controller's for the job's owner or an admin (`team_mode`: the control plane's addresses are left out, as
    users never see them). KeyError if there is no such job."""
    import asyncio
    from importlib.metadata import PackageNotFoundError, version

    status = await client.status(job_id)
    temporal = client.temporal
    detailed = _detailed(status)
    description = await temporal.get_workflow_handle(job_id).describe()
    details = await description.static_details()
    ids = [job_id, *(task_workflow_id(job_id, i) for i in range(status.num_tasks))]
    histories = list(await asyncio.gather(*(fetch_history(temporal, wid) for wid in ids)))
    job_history, task_histories = histories[0], histories[1:]
    live = {w.worker_id: w for w in await client.list_workers()}
    try:
        iris_version = version("iris")
    except PackageNotFoundError:
        iris_version = "unknown"

    where = ("the cluster's own (team mode)" if team_mode else f"{_cell(temporal.service_client.config.target_host)} "
             f"(namespace {temporal.namespace}); store {_cell(client.store_url)}")  # fmt: skip
    out = [
        f"# Iris bug report: job `{job_id}`", "",
        f"Made {_utc(time.time())} with iris {iris_version}; Temporal {where}.", "",
        "> Review before sharing: the log tails are the job's own output. Environment values are left out.", "",
        "## Request", "", details or "(not recorded)", "",
    ]  # fmt: skip
    out += _status_section(status)
    if not status.done:
        from iris.client.views import fleet_view
        try:
            scaling = await fleet_view.autoscaler_status(temporal)
        except RPCError:
            scaling = None
        if scaling is not None and job_id in scaling.unmet:
            out += ["", f"**Autoscaler:** no scale group takes it now: {_cell(scaling.unmet[job_id])}"]
    out += ["", f"## Tasks in detail ({len(detailed)} of {status.num_tasks}: those that did not succeed, and task 0)"]
    for i in detailed:
        task = status.tasks[i] if i < len(status.tasks) else None
        data = await asyncio.to_thread(client.logs.read_bytes, job_id, i)
        tail = last_lines(data, LOG_TAIL_LINES).decode("utf-8", "replace")
        out += ["", f"### Task {i}: {task.state if task else '?'}"]
        if task is not None and task.error:
            out += ["", f"**Error:** {_cell(task.error)}"]
        count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        out += ["", f"Log (last {min(count, LOG_TAIL_LINES)} of {count} lines, all attempts):", "",
                fenced(tail, "text") if tail else "(empty)"]  # fmt: skip
    workers = await asyncio.to_thread(_workers_section, client, status, workers_of(task_histories), live)
    out += ["", *workers]
    out += ["", "## Workflow histories", "",
            f"Latest run of each; more than {HISTORY_HEAD + HISTORY_TAIL} events are cut in the middle. Full JSON: "
            "`temporal workflow show --output json -w WORKFLOW_ID`."]  # fmt: skip
    for history in [job_history, *(task_histories[i] for i in detailed if i < len(task_histories))]:
        count = len(history.events)
        out += ["", f"### `{history.workflow_id}` (run `{history.run_id or '?'}`, {count} events)", "",
                render_history(history)]  # fmt: skip
    return "\n".join(out) + "\n"
