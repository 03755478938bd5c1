"""What the server wrote: history events counted per workflow, and one job's submit-to-running timeline.

Counting workflow tasks and events says what a throughput run cost the server; the
timeline merges the job's, its task's and the scheduler's events on one clock so the
hops between submit and the task's process starting can be read off.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import SCHEDULER_WORKFLOW_ID, task_workflow_id


@dataclass
class TimelineEvent:
    """One history event on the submit-to-running path, relative to the client's submit."""

    at_ms: float
    workflow: str
    event_id: int
    event: str
    detail: str = ""


@dataclass
class Timeline:
    """The merged events of one latency job, and how many workflow tasks ran before its process started."""

    job_id: str = ""
    running_ms: float = 0.0
    events: list[TimelineEvent] = field(default_factory=list)
    workflow_tasks_before_running: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The timeline for `--json` (empty values when none was taken)."""
        return {
            "job_id": self.job_id,
            "running_at_ms": self.running_ms,
            "workflow_tasks_before_running": self.workflow_tasks_before_running,
            "events": [asdict(e) for e in self.events],
        }


def event_seconds(event: HistoryEvent) -> float:
    """The server's wall-clock time of `event`, in seconds since the epoch."""
    return event.event_time.seconds + event.event_time.nanos / 1e9


async def fetch_history_if_any(client: Client, workflow_id: str, run_id: str | None = None) -> WorkflowHistory | None:
    """The history of one run (the latest without `run_id`); None when the workflow does not exist."""
    try:
        return await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


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
        history = await fetch_history_if_any(client, workflow_id, run_id)
        if history is None:
            return tasks, events
        previous, first_at = "", math.inf
        for event in history.events:
            at = event_seconds(event)
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


def _sort(events: list[TimelineEvent]) -> None:
    """Order by time, then workflow and event id, so simultaneous events read the same way every run."""
    events.sort(key=lambda e: (e.at_ms, e.workflow, e.event_id))


async def fetch_timeline(client: Client, job_id: str, t0: float, t_end: float) -> list[TimelineEvent]:
    """History events of the job, its task 0 and the scheduler between submit (`t0`) and `t_end`.

    Event times are the server's clock and `t0` the client's; both run on this host.
    """
    names = {job_id: "job", task_workflow_id(job_id, 0): "task", SCHEDULER_WORKFLOW_ID: "scheduler"}
    events: list[TimelineEvent] = []
    for workflow_id, label in names.items():
        history = await fetch_history_if_any(client, workflow_id)
        if history is None:
            continue  # e.g. a job that runs its task without a child workflow
        for event in history.events:
            at = event_seconds(event)
            if t0 - 0.01 <= at <= t_end + 0.01:
                kind, detail = describe_event(event)
                events.append(TimelineEvent(round((at - t0) * 1000, 1), label, event.event_id, kind, detail))
    _sort(events)
    return events


def count_workflow_tasks(events: Sequence[TimelineEvent], before_ms: float) -> dict[str, int]:
    """Workflow tasks completed per workflow before `before_ms` (the task's process start)."""
    counts: dict[str, int] = {}
    for e in events:
        if e.event == "WORKFLOW_TASK_COMPLETED" and e.at_ms <= before_ms:
            counts[e.workflow] = counts.get(e.workflow, 0) + 1
    return counts


async def job_timeline(client: Client, job_id: str, t0: float, running: float, done: float) -> Timeline:
    """The server's events of `job_id` from submit (`t0`) to `done`, with the process start and the client's view.

    `running` (the process's own clock) and `done` (when the client saw SUCCEEDED) are
    added as events of their own, so the table shows where the process started among the hops.
    """
    events = await fetch_timeline(client, job_id, t0, done)
    running_ms = round((running - t0) * 1000, 1)
    events.append(TimelineEvent(running_ms, "process", 0, "TASK_PROCESS_STARTED", "date +%s.%N"))
    events.append(TimelineEvent(round((done - t0) * 1000, 1), "client", 0, "SUCCEEDED_OBSERVED"))
    _sort(events)
    return Timeline(job_id, running_ms, events, count_workflow_tasks(events, running_ms))
