"""Schedules: Temporal Schedules that submit a job at each firing (no cron of Iris's own).

A schedule's action starts a JobWorkflow from a request built and validated once, at creation, by the
same code as `submit` (its function or command stored once, its user the creator's). Temporal appends
the firing's time to the action's workflow id, so each job's id, and its name, is `<schedule>-<fire
time>`; the job takes its name and its submission time from its own start (JobWorkflow, with
`JobRequest.schedule` set). Pause, unpause, trigger, delete, overlap policies and time zones are
Temporal's own. The cron and time zone as given are kept in the schedule's memo (Temporal compiles a
cron into calendars), which also marks the schedule as Iris's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import CONTROL_TASK_QUEUE
from activities.proto import cluster_pb2 as pb
from iris.client.schedule_spec import OVERLAP_NAMES, ScheduleStatus, check_schedule
from iris.client.status_reads import _start_attributes
from workflows.jobs.job_workflow import JobWorkflow
from workflows.visibility import initial_job_view

if TYPE_CHECKING:
    from iris.client.async_client import AsyncIrisClient

MEMO_KEY = "iris_schedule"
OVERLAPS = {name: ScheduleOverlapPolicy[name.upper()] for name in OVERLAP_NAMES}  # skip -> SKIP, ...
_TRIGGERED: dict[str, float] = {}  # schedule -> when this process last triggered it (time.time())
NEXT_RUNS = 3
LISTING_WAIT = 10.0  # seconds create and delete wait for the listing to show them


async def start(
    client: AsyncIrisClient, req: pb.JobRequest, payload: bytes | None, *, cron: str, timezone: str, overlap: str
) -> None:
    """Create the Temporal Schedule of `req` (named `req.schedule`, its user already set): its function
    stored once, the schedule's cron, time zone and overlap policy checked again (the API's caller is not
    trusted to have)."""
    name = req.schedule
    check_schedule(name, cron, timezone, overlap)
    req.namespace = req.namespace or req.user
    req.name, req.submitted_at = name, 0.0  # each job's name and time come from its firing
    if req.after:
        from iris.client.job_control import check_dependencies

        await check_dependencies(client.temporal, list(req.after))
    if payload is not None:
        key = f"schedules/{name}/{uuid.uuid4().hex[:8]}/function"
        await asyncio.to_thread(client.blobs.put, key, payload)
        req.entrypoint.function_blob = key
    elif not req.entrypoint.command.argv:
        raise ValueError("request: a schedule's job runs a command, or a function given as its payload")
    what = " ".join(req.entrypoint.command.argv)[:80] if req.entrypoint.command.argv else "python callable"
    action = ScheduleActionStartWorkflow(
        JobWorkflow.run,
        req,
        id=name,  # Temporal appends the firing's time: `<schedule>-<fire time>`
        task_queue=CONTROL_TASK_QUEUE,
        typed_search_attributes=_start_attributes(req),
        memo=initial_job_view(req).to_memo(),
        static_summary=f"{name} (schedule): {req.replicas} x {what}",
    )
    schedule = Schedule(
        action=action,
        spec=ScheduleSpec(cron_expressions=[cron], time_zone_name=timezone),
        policy=SchedulePolicy(overlap=OVERLAPS[overlap]),
        state=ScheduleState(note=f"created by {req.user}"),
    )
    memo = {MEMO_KEY: {"cron": cron, "timezone": timezone, "overlap": overlap, "user": req.user}}
    try:
        handle = await client.temporal.create_schedule(name, schedule, memo=memo)
        if not (await handle.describe()).info.next_action_times:  # e.g. a year already past: it would never fire
            await handle.delete()
            await _until_listed(client, name, listed=False)  # refused: not listed after, as if never made
            raise ValueError(f"cron: {cron!r} never fires (no time to come matches it in {timezone})")
        await _until_listed(client, name, listed=True)
    except ScheduleAlreadyRunningError:
        raise ValueError(f"name: a schedule named {name!r} exists (delete it first)") from None
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            field = "timezone" if "time zone" in err.message.lower() or "timezone" in err.message.lower() else "cron"
            raise ValueError(f"{field}: {err.message}") from None
        raise


def _memo_of(memo: Mapping[str, Any]) -> dict[str, Any] | None:
    value = memo.get(MEMO_KEY)
    return value if isinstance(value, dict) else None


def _status(
    name: str, own: dict[str, Any], paused: bool, next_times: Sequence[datetime], recent: Sequence[Any]
) -> ScheduleStatus:
    jobs = tuple(getattr(r.action, "workflow_id", "") for r in recent)
    return ScheduleStatus(
        name=name,
        cron=str(own.get("cron", "")),
        timezone=str(own.get("timezone", "UTC")),
        paused=paused,
        next_runs=() if paused else tuple(next_times[:NEXT_RUNS]),  # a paused schedule fires at none of them
        recent_jobs=tuple(j for j in jobs if j),
        overlap=str(own.get("overlap", "skip")),
        user=str(own.get("user", "")),
    )


async def list_temporal(client: AsyncIrisClient) -> list[ScheduleStatus]:
    """Every Iris schedule Temporal lists, by name."""
    out = []
    async for entry in await client.temporal.list_schedules():
        own = _memo_of(await entry.memo())
        if own is None:
            continue  # not Iris's
        paused = bool(entry.schedule.state.paused) if entry.schedule is not None else False
        info = entry.info
        nexts, recent = (info.next_action_times, info.recent_actions) if info is not None else ([], [])
        out.append(_status(entry.id, own, paused, nexts, recent))
    return sorted(out, key=lambda s: s.name)


async def _until_listed(client: AsyncIrisClient, name: str, *, listed: bool, paused: bool | None = None) -> None:
    """Wait (up to LISTING_WAIT seconds) until Temporal's listing shows `name` (or no longer does), and as
    `paused` when that is given.

    Listing reads the visibility store, which follows writes by up to a second or so: without this
    wait, `iris schedule list` right after `create`, `delete`, `pause` or `unpause` could show the old list.
    """
    deadline = asyncio.get_running_loop().time() + LISTING_WAIT
    while True:
        found = [entry async for entry in await client.temporal.list_schedules() if entry.id == name]
        shown = bool(found) == listed and (
            paused is None or any(bool(e.schedule and e.schedule.state.paused) == paused for e in found)
        )
        if shown or asyncio.get_running_loop().time() >= deadline:
            return
        await asyncio.sleep(0.2)


class AsyncSchedule:
    """One schedule by name; every call raises KeyError when there is no such Iris schedule."""

    def __init__(self, client: AsyncIrisClient, name: str) -> None:
        self._client = client
        self.name = name
        self._handle: ScheduleHandle = client.temporal.get_schedule_handle(name)

    async def _described(self) -> ScheduleDescription:
        """The schedule as Temporal describes it; KeyError unless it is an Iris schedule."""
        try:
            desc = await self._handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise KeyError(f"no such schedule: {self.name}") from None
            raise
        if _memo_of(await desc.memo()) is None:
            raise KeyError(f"no such schedule: {self.name} (a Temporal schedule that is not Iris's)")
        return desc

    async def status(self) -> ScheduleStatus:
        desc = await self._described()
        own = _memo_of(await desc.memo()) or {}
        info = desc.info
        return _status(self.name, own, desc.schedule.state.paused, info.next_action_times, info.recent_actions)

    async def pause(self, note: str = "paused") -> None:
        await self.status()
        await self._handle.pause(note=note)
        await _until_listed(self._client, self.name, listed=True, paused=True)

    async def unpause(self, note: str = "unpaused") -> None:
        await self.status()
        await self._handle.unpause(note=note)
        await _until_listed(self._client, self.name, listed=True, paused=False)

    async def trigger(self) -> None:
        """Submit one job now, whatever runs already (the overlap policy is for the schedule's own firings).

        A firing's job is named by its time to the second, and Temporal starts one workflow per id: a second
        trigger within the same second would start nothing. So a trigger waits for the next second when the
        schedule already acted in this one (as Temporal lists it, or as this process triggered it)."""
        desc = await self._described()
        times = [a.scheduled_at.timestamp() for a in desc.info.recent_actions]
        latest = max([*times, _TRIGGERED.get(self.name, 0.0)])
        now = time.time()
        if int(latest) >= int(now):
            await asyncio.sleep(int(latest) + 1 - now + 0.02)
        _TRIGGERED[self.name] = time.time()
        await self._handle.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)

    async def delete(self) -> None:
        """Delete the schedule; the jobs it started run on."""
        await self.status()
        await self._handle.delete()
        await _until_listed(self._client, self.name, listed=False)

    async def job_ids(self) -> list[str]:
        """The ids of every job the schedule started, oldest first (visibility: Temporal tags them); not those of
        an earlier schedule of the same name, deleted since (they started before this one was created)."""
        desc = await self._described()
        query = f"WorkflowType = 'JobWorkflow' AND TemporalScheduledById = '{self.name}'"
        created = desc.info.created_at
        try:
            found = [(wf.start_time, wf.id) async for wf in self._client.temporal.list_workflows(query)
                     if created is None or wf.start_time >= created]  # fmt: skip
        except RPCError:  # a server without that search attribute: the schedule's own recent list
            return [j for j in (getattr(r.action, "workflow_id", "") for r in desc.info.recent_actions) if j]
        ids = [job_id for _, job_id in sorted(found)]
        return list(dict.fromkeys(ids))  # a job that continued as new is listed once per run



