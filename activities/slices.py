"""Durable slice activities over a Platform: create, wait, bootstrap, register, watch, drain, terminate.

SliceWorkflow calls these by name. Every one is idempotent (a platform step is
keyed by the slice id), so Temporal may retry any of them. The long waits
heartbeat, so a controller that dies under them is noticed within the heartbeat
timeout and the wait resumes on another controller.

A platform's `QuotaExhausted`, `PlatformRefused` and `SliceFailed` become
non-retryable `ApplicationError`s of those types: the slice fails at once (no
retries of a request that cannot succeed), the workflow tells them apart from
transient failures (which Temporal retries), and the autoscaler backs the group
off: on quota, and for longer on a permanent refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import SCHEDULER_WORKFLOW_ID, WORKERS_QUERY
from activities.contracts.fleet import (
    CLEANUP_ORPHANS,
    INVALID_SCALE_GROUP,
    MANAGED_LABEL,
    PLATFORM_REFUSED,
    QUOTA_EXHAUSTED,
    SCALE_GROUP_LABEL,
    SLICE_BOOTSTRAP,
    SLICE_CREATE,
    SLICE_FAILED,
    SLICE_PREEMPTED,
    SLICE_STILL_BUSY,
    SLICE_TERMINATE,
    SLICE_WAIT_DRAINED,
    SLICE_WAIT_READY,
    SLICE_WAIT_REGISTERED,
    SLICE_WATCH,
    BusyCheck,
    ControlPlaneAddress,
    DrainWait,
    OrphanCleanup,
    PlatformState,
    RegistrationWait,
    ScaleGroupSpec,
    SliceInfo,
    SliceRequest,
    slice_worker_ids,
)
from activities.contracts.worker_pages import all_workers
from activities.heartbeat import heartbeating
from activities.platforms import platform_for
from activities.platforms.base import Platform, PlatformRefused, QuotaExhausted, SliceFailed
from activities.proto import cluster_pb2 as pb

log = structlog.get_logger("iris.slices")

POLL_SECONDS = 1.0
WATCH_SECONDS = 3.0

T = TypeVar("T")


async def _platform_call(group: ScaleGroupSpec, step: Callable[[Platform], Awaitable[T]]) -> T:
    """Run one platform step, turning its expected failures into typed, non-retryable errors."""
    try:
        platform = platform_for(group)
    except ValueError as e:
        raise ApplicationError(str(e), type=INVALID_SCALE_GROUP, non_retryable=True) from None
    try:
        return await step(platform)
    except QuotaExhausted as e:
        raise ApplicationError(str(e), type=QUOTA_EXHAUSTED, non_retryable=True) from None
    except PlatformRefused as e:
        raise ApplicationError(str(e), type=PLATFORM_REFUSED, non_retryable=True) from None
    except SliceFailed as e:
        raise ApplicationError(str(e), type=SLICE_FAILED, non_retryable=True) from None


async def healthy_workers(client: Client) -> dict[str, pb.WorkerStatus]:
    """The scheduler's workers by id (a query: the controller answers it)."""
    scheduler = client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
    workers = await all_workers(lambda after: scheduler.query(WORKERS_QUERY, after, result_type=pb.WorkerList))
    return {w.worker_id: w for w in workers}


class SliceActivities:
    """The slice activities of one controller; `control` is where bootstrapped agents find it."""

    def __init__(self, control: ControlPlaneAddress) -> None:
        self.control = control

    @activity.defn(name=SLICE_CREATE)
    async def create(self, req: SliceRequest) -> SliceInfo:
        """Ask the platform for the slice (or find the one an earlier attempt asked for)."""
        info = await _platform_call(req.group, lambda p: heartbeating(p.create_slice(req.slice_id, req.group)))
        log.info("slice.created", slice_id=req.slice_id, group=req.group.name, state=info.state)
        return info

    @activity.defn(name=SLICE_WAIT_READY)
    async def wait_ready(self, req: SliceRequest) -> SliceInfo:
        """Describe the slice until every host is reachable; SliceFailed if the platform gives up on it."""
        while True:
            info = await _platform_call(req.group, lambda p: p.describe(req.slice_id))
            if info is None:
                raise ApplicationError(f"slice {req.slice_id} vanished while being created", type=SLICE_FAILED,
                                       non_retryable=True)  # fmt: skip
            if info.state == PlatformState.READY:
                return info
            if info.state in (PlatformState.FAILED, PlatformState.PREEMPTED, PlatformState.DELETING):
                kind = SLICE_PREEMPTED if info.state == PlatformState.PREEMPTED else SLICE_FAILED
                raise ApplicationError(f"slice {req.slice_id} {info.state.lower()}: {info.error}", type=kind,
                                       non_retryable=True)  # fmt: skip
            activity.heartbeat(info.state)
            await asyncio.sleep(POLL_SECONDS)

    @activity.defn(name=SLICE_BOOTSTRAP)
    async def bootstrap(self, req: SliceRequest) -> None:
        """Start the worker agent on every host (again where one is missing)."""
        await _platform_call(
            req.group, lambda p: heartbeating(p.bootstrap(req.slice_id, req.group, self.control))
        )

    @activity.defn(name=SLICE_WAIT_REGISTERED)
    async def wait_registered(self, req: RegistrationWait) -> None:
        """Wait until every host's worker is healthy in the scheduler; SliceFailed if a host dies or time runs out."""
        client = activity.client()
        wanted = slice_worker_ids(req.slice_id, req.group)
        deadline = time.monotonic() + req.timeout_seconds
        missing = list(wanted)
        while True:
            with contextlib.suppress(RPCError, WorkflowQueryFailedError):  # the scheduler not answering is "not yet"
                workers = await healthy_workers(client)
                missing = [w for w in wanted if w not in workers or not workers[w].healthy]
                if not missing:
                    return
            info = await _platform_call(req.group, lambda p: p.describe(req.slice_id))
            if info is None or info.state != PlatformState.READY:
                why = "is gone" if info is None else f"is {info.state.lower()}: {info.error}"
                # A failure, whatever the platform calls it: its agents never registered (the local platform
                # says PREEMPTED of exited processes), so the group backs off. A cloud's preemption while
                # the slice is made is told apart in `wait_ready`.
                raise ApplicationError(f"bootstrap failed: slice {req.slice_id} {why}", type=SLICE_FAILED,
                                       non_retryable=True)  # fmt: skip
            if time.monotonic() > deadline:
                raise ApplicationError(
                    f"bootstrap failed: {len(missing)} of {len(wanted)} workers did not register within "
                    f"{req.timeout_seconds:g}s ({', '.join(missing)})",
                    type=SLICE_FAILED, non_retryable=True,
                )  # fmt: skip
            activity.heartbeat(len(wanted) - len(missing))
            await asyncio.sleep(POLL_SECONDS)

    @activity.defn(name=SLICE_WATCH)
    async def watch(self, req: SliceRequest) -> str:
        """Watch a READY slice; return why it is lost (preempted or gone). Runs until then or cancelled."""
        while True:
            try:
                info = await _platform_call(req.group, lambda p: p.describe(req.slice_id))
            except ApplicationError as e:
                if e.type != PLATFORM_REFUSED:
                    raise
                # refused to read it (e.g. a permission revoked): the slice itself may be fine; look again
                log.warning("slice.watch_refused", slice_id=req.slice_id, error=e.message)
                info = SliceInfo(req.slice_id, req.group.name, PlatformState.READY)
            except Exception as e:  # a flaky platform API is not a lost slice: look again
                log.warning("slice.watch_failed", slice_id=req.slice_id, error=str(e))
                info = SliceInfo(req.slice_id, req.group.name, PlatformState.READY)
            if info is None:
                return f"slice {req.slice_id} is gone from its platform"
            if info.state != PlatformState.READY:
                return f"slice {req.slice_id} {info.state.lower()}: {info.error}".rstrip(": ")
            activity.heartbeat()
            await asyncio.sleep(WATCH_SECONDS)

    @activity.defn(name=SLICE_WAIT_DRAINED)
    async def wait_drained(self, req: DrainWait) -> int:
        """Wait until the workers run no task, at most `timeout_seconds`; the tasks still running then."""
        client = activity.client()
        deadline = time.monotonic() + req.timeout_seconds
        while True:
            running = -1
            with contextlib.suppress(RPCError, WorkflowQueryFailedError):  # not answering: look again
                workers = await healthy_workers(client)
                running = sum(len(workers[w].running_tasks) for w in req.worker_ids if w in workers)
            if running == 0 or time.monotonic() >= deadline:
                return max(running, 0)
            activity.heartbeat(running)
            await asyncio.sleep(POLL_SECONDS)

    @activity.defn(name=SLICE_STILL_BUSY)
    async def still_busy(self, req: BusyCheck) -> str:
        """Why a slice asked to cordon only if idle must stay ("" = cordoned and idle: safe to remove).

        Asked after the `only_if_idle` cordon reached the scheduler: it cordons all of the
        workers or none, and commits no placement on a cordoned one, so an idle, cordoned
        slice stays idle.
        """
        workers = await healthy_workers(activity.client())
        mine = [workers[w] for w in req.worker_ids if w in workers]
        running = sum(len(w.running_tasks) for w in mine)
        if running:
            return f"{running} tasks placed on it"
        if not all(w.cordoned for w in mine):
            return "it had work when it was asked to cordon"
        return ""

    @activity.defn(name=SLICE_TERMINATE)
    async def terminate(self, req: SliceRequest) -> None:
        """Delete the slice (agents stopped first); a slice that is already gone is fine."""
        await _platform_call(req.group, lambda p: heartbeating(p.terminate(req.slice_id)))
        log.info("slice.terminated", slice_id=req.slice_id, group=req.group.name)

    @activity.defn(name=CLEANUP_ORPHANS)
    async def cleanup_orphans(self, req: OrphanCleanup) -> list[str]:
        """Terminate every slice Iris made for these groups whose SliceWorkflow no longer runs."""
        return await cleanup_orphans(activity.client(), req.groups, heartbeat=activity.heartbeat)

    def all(self) -> list[Callable[..., Any]]:
        return [self.create, self.wait_ready, self.bootstrap, self.wait_registered, self.watch,
                self.wait_drained, self.still_busy, self.terminate, self.cleanup_orphans]  # fmt: skip


async def slice_workflow_running(client: Client, slice_id: str) -> bool:
    """Whether the SliceWorkflow with this id runs (it owns the slice); False when it ended or never existed."""
    try:
        desc = await client.get_workflow_handle(slice_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return desc.status == WorkflowExecutionStatus.RUNNING


async def cleanup_orphans(
    client: Client, groups: list[ScaleGroupSpec], heartbeat: Callable[..., None] | None = None
) -> list[str]:
    """Find each group's slices by label and terminate those no running SliceWorkflow owns; their ids.

    A SliceWorkflow is started before its platform slice is created, so a slice without a
    running workflow is one whose workflow ended (or was terminated) and left it behind.
    """
    cleaned = []
    for group in groups:
        try:
            platform = platform_for(group)
            found = await platform.list_slices({MANAGED_LABEL: "true", SCALE_GROUP_LABEL: group.name})
        except Exception as e:  # one broken group must not stop the others' cleanup
            log.warning("slice.orphan_scan_failed", group=group.name, error=str(e))
            continue
        for info in found:
            if await slice_workflow_running(client, info.slice_id):
                continue
            log.warning("slice.orphan", slice_id=info.slice_id, group=group.name, state=info.state)
            await platform.terminate(info.slice_id)
            cleaned.append(info.slice_id)
            if heartbeat is not None:
                heartbeat(info.slice_id)
    return cleaned
