"""SliceWorkflow(slice_id): one slice from creation to deletion, driven by the table in slice_lifecycle.

Each state's work is a durable activity (create and wait for the infrastructure,
bootstrap and wait for registration, watch, drain, terminate); its outcome is an
event, and `transition()` says where to go and what to do on the way. A slice is
not a child of the autoscaler: it outlives the autoscaler's continue-as-new, and
the autoscaler learns of every state change from a `slice_state` signal.

The Temporal UI is the fleet browser: the state is the `IrisSliceState` search
attribute, the summary names the group and hosts, and the memo carries the hosts,
worker ids, error and creation time that `iris slice list` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        AUTOSCALER_WORKFLOW_ID,
        CORDON_WORKERS,
        REMOVE_WORKERS,
        SCALE_DOWN,
        SCHEDULER_WORKFLOW_ID,
        SLICE_STATE,
        SLICE_STATE_ATTRIBUTE,
    )
    from activities.contracts.fleet import (
        SLICE_BOOTSTRAP,
        SLICE_CREATE,
        SLICE_HEARTBEAT_SECONDS,
        SLICE_STILL_BUSY,
        SLICE_TERMINATE,
        SLICE_WAIT_DRAINED,
        SLICE_WAIT_READY,
        SLICE_WAIT_REGISTERED,
        SLICE_WATCH,
        BusyCheck,
        DrainWait,
        RegistrationWait,
        ScaleGroupSpec,
        SliceInfo,
        SliceRequest,
        slice_worker_ids,
    )
    from workflows.fleet.slice_lifecycle import TERMINAL_SLICE_STATES, Effect, SliceEvent, SliceState, transition
    from workflows.messages import CordonWorkers, RemoveWorkers

SLICE_STATE_KEY = SearchAttributeKey.for_keyword(SLICE_STATE_ATTRIBUTE)
WAIT_CANCELLED = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
TRY_CANCEL = workflow.ActivityCancellationType.TRY_CANCEL
STEP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                         maximum_attempts=5)  # fmt: skip
TERMINATE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=60),
                              maximum_attempts=20)  # fmt: skip


@dataclass
class SliceInput:
    slice_id: str
    group: ScaleGroupSpec
    notify: str = AUTOSCALER_WORKFLOW_ID  # the workflow told of every state change ("" = nobody)
    registration_timeout_seconds: float = 300.0
    infrastructure_timeout_seconds: float = 1800.0
    heartbeat_timeout_seconds: float = SLICE_HEARTBEAT_SECONDS  # its long steps (autoscaler.slice_heartbeat_timeout)


@dataclass
class ScaleDown:
    """Signal `scale_down`: cordon, let running tasks finish for up to `drain_timeout_seconds`, terminate.

    `only_if_idle` (the autoscaler's idle scale-down): a READY slice that has work placed on it
    when the cordon reaches the scheduler stays READY. The autoscaler decides on a snapshot; a
    job can land on the slice between that snapshot and the cordon.
    """

    reason: str
    drain_timeout_seconds: float = 0.0
    only_if_idle: bool = False


@dataclass
class SliceUpdate:
    """Signal `slice_state` to the autoscaler: a slice moved. `error_type` is the failure's type, if any."""

    slice_id: str
    group: str
    state: SliceState
    worker_ids: list[str] = field(default_factory=list)
    error: str = ""
    error_type: str = ""
    at: float = 0.0
    placement: str = ""  # where the platform made it and why there (SliceInfo.placement), once created


def _failure(err: BaseException) -> tuple[str, str]:
    """(message, type) of an activity failure: the ApplicationError under it when there is one."""
    cause = err.cause if isinstance(err, ActivityError) else err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        return cause.message, cause.type or ""
    return str(cause or err), type(cause or err).__name__


@workflow.defn(name="SliceWorkflow", versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class SliceWorkflow:
    @workflow.init
    def __init__(self, inp: SliceInput) -> None:
        self.inp = inp
        self.state = SliceState.CREATING
        self.scale_down: ScaleDown | None = None
        self.error = ""
        self.error_type = ""
        self.hosts: list[str] = []
        self.placement = ""
        self.worker_ids = slice_worker_ids(inp.slice_id, inp.group)
        self.created_at = 0.0
        self.ready_at = 0.0  # when it last became READY (the dashboard's "slice ready")

    @workflow.run
    async def run(self, inp: SliceInput) -> str:
        self.created_at = workflow.now().timestamp()
        await self._publish()
        while self.state not in TERMINAL_SLICE_STATES:
            event = await self._work()
            step = transition(self.state, event)
            previous, self.state = self.state, step.next
            if self.state == SliceState.READY and previous != SliceState.READY:
                self.ready_at = workflow.now().timestamp()
            workflow.logger.info("slice %s: %s --%s--> %s", inp.slice_id, previous, event, self.state)
            await self._publish()
            await self._perform(step.effects)
        return f"{self.state}: {self.error}" if self.error else str(self.state)

    # -- the work of each state, as an event ------------------------------------------------------

    async def _work(self) -> SliceEvent:
        if self.state == SliceState.CREATING:
            return await self._until_scale_down(self._create())
        if self.state == SliceState.BOOTSTRAPPING:
            return await self._until_scale_down(self._bootstrap())
        if self.state == SliceState.READY:
            event = await self._until_scale_down(self._watch())
            if event == SliceEvent.SCALE_DOWN and self.scale_down is not None and self.scale_down.only_if_idle:
                busy = await self._still_busy()
                if busy and self.scale_down.only_if_idle:  # not overridden meanwhile by `iris slice terminate`
                    workflow.logger.info("slice %s stays: %s", self.inp.slice_id, busy)
                    self.scale_down = None
                    return SliceEvent.BUSY
            return event
        assert self.state == SliceState.DRAINING
        return SliceEvent.DRAINED

    async def _until_scale_down(self, work: Any) -> SliceEvent:
        """Run a state's work; a scale-down signal meanwhile cancels it and wins."""
        task: asyncio.Task[SliceEvent] = asyncio.ensure_future(work)
        await workflow.wait_condition(lambda: task.done() or self.scale_down is not None)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, CancelledError, ActivityError):
            await task
        return SliceEvent.SCALE_DOWN

    async def _step(self, name: str, arg: Any, *, timeout: timedelta, heartbeat: bool = False,
                    retry: RetryPolicy = STEP_RETRY, result_type: type | None = None,
                    cancellation: workflow.ActivityCancellationType = WAIT_CANCELLED) -> Any:  # fmt: skip
        """Run one slice activity; by default a cancelled one is waited for (its side effects end first)."""
        beats = timedelta(seconds=self.inp.heartbeat_timeout_seconds) if heartbeat else None
        return await workflow.execute_activity(
            name, arg, start_to_close_timeout=timeout, heartbeat_timeout=beats,
            retry_policy=retry, result_type=result_type, cancellation_type=cancellation,
        )  # fmt: skip

    def _failed(self, err: BaseException, doing: str) -> SliceEvent:
        message, kind = _failure(err)
        self.error, self.error_type = f"{doing}: {message}", kind
        return SliceEvent.ERROR

    async def _create(self) -> SliceEvent:
        req = SliceRequest(self.inp.slice_id, self.inp.group)
        try:
            created: SliceInfo = await self._step(SLICE_CREATE, req, timeout=timedelta(minutes=10), heartbeat=True,
                                                  result_type=SliceInfo)  # fmt: skip
            self.placement = created.placement
            info: SliceInfo = await self._step(
                SLICE_WAIT_READY, req, timeout=timedelta(seconds=self.inp.infrastructure_timeout_seconds),
                heartbeat=True, result_type=SliceInfo,
            )  # fmt: skip
        except ActivityError as err:
            return self._failed(err, "create")
        self.hosts = [h.address for h in info.hosts]
        return SliceEvent.CREATED

    async def _bootstrap(self) -> SliceEvent:
        req = SliceRequest(self.inp.slice_id, self.inp.group)
        wait = RegistrationWait(self.inp.slice_id, self.inp.group, self.inp.registration_timeout_seconds)
        try:
            await self._step(SLICE_BOOTSTRAP, req, timeout=timedelta(minutes=10), heartbeat=True)
            await self._step(
                SLICE_WAIT_REGISTERED, wait, timeout=timedelta(seconds=self.inp.registration_timeout_seconds + 60),
                heartbeat=True, retry=RetryPolicy(maximum_attempts=3),
            )  # fmt: skip
        except ActivityError as err:
            return self._failed(err, "bootstrap")
        return SliceEvent.REGISTERED

    async def _still_busy(self) -> str:
        """Cordon only if idle, then look: why the slice must stay ("" when it may go)."""
        await self._tell_scheduler(CORDON_WORKERS, CordonWorkers(
            self.worker_ids, True, f"slice {self.inp.slice_id} idle", only_if_idle=True))  # fmt: skip
        try:
            why: str = await self._step(SLICE_STILL_BUSY, BusyCheck(self.worker_ids), timeout=timedelta(seconds=60),
                                        result_type=str)  # fmt: skip
        except ActivityError as err:  # cannot tell: scale down as asked (running tasks still drain)
            workflow.logger.warning("slice %s: could not check for work: %s", self.inp.slice_id, _failure(err)[0])
            return ""
        return why

    async def _watch(self) -> SliceEvent:
        req = SliceRequest(self.inp.slice_id, self.inp.group)
        try:
            # A scale-down stops waiting for the watch as soon as it asks it to stop: the watch only
            # reads, and waiting for it to acknowledge took up to one heartbeat throttle (8 s).
            why: str = await self._step(SLICE_WATCH, req, timeout=timedelta(days=3650), heartbeat=True,
                                        retry=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                                        result_type=str, cancellation=TRY_CANCEL)  # fmt: skip
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):  # this workflow stopped it (a scale-down): not the slice's error
                return SliceEvent.ERROR
            return self._failed(err, "watch")
        self.error, self.error_type = why, "SlicePreempted"
        return SliceEvent.LOST

    # -- effects --------------------------------------------------------------------------------

    async def _perform(self, effects: tuple[Effect, ...]) -> None:
        for effect in effects:
            if effect == Effect.CORDON:
                await self._tell_scheduler(CORDON_WORKERS, CordonWorkers(
                    self.worker_ids, True, f"slice {self.inp.slice_id} draining"))  # fmt: skip
            elif effect == Effect.DRAIN:
                timeout = self.scale_down.drain_timeout_seconds if self.scale_down else 0.0
                if timeout > 0:
                    await self._step(
                        SLICE_WAIT_DRAINED, DrainWait(self.worker_ids, timeout),
                        timeout=timedelta(seconds=timeout + 60), heartbeat=True, result_type=int,
                    )  # fmt: skip
            elif effect == Effect.TERMINATE:
                try:
                    await self._step(SLICE_TERMINATE, SliceRequest(self.inp.slice_id, self.inp.group),
                                     timeout=timedelta(minutes=10), heartbeat=True, retry=TERMINATE_RETRY)  # fmt: skip
                except ActivityError as err:  # given up: orphan cleanup finds it once this workflow has ended
                    message, _ = _failure(err)
                    self.error = f"{self.error}; terminate failed: {message}".lstrip("; ")
                    await self._publish()
            elif effect == Effect.REMOVE_WORKERS:
                why = self.error or f"slice {self.inp.slice_id} {self.state.lower()}"  # e.g. "slice s preempted: ..."
                await self._tell_scheduler(REMOVE_WORKERS, RemoveWorkers(self.worker_ids, why))
            # BOOTSTRAP and WATCH are the next state's work (see _work)

    async def _tell_scheduler(self, signal: str, arg: Any) -> None:
        try:
            await workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(signal, arg)
        except Exception as err:  # no scheduler (yet): nothing of ours is in its state
            workflow.logger.warning("slice %s: %s not delivered: %s", self.inp.slice_id, signal, err)

    async def _publish(self) -> None:
        """Search attribute, details and memo for visibility; a signal to the autoscaler."""
        workflow.upsert_search_attributes([SLICE_STATE_KEY.value_set(str(self.state))])
        workflow.upsert_memo(
            {
                "scale_group": self.inp.group.name,
                "hosts": self.hosts,
                "worker_ids": self.worker_ids,
                "error": self.error,
                "created_at": self.created_at,
                "ready_at": self.ready_at,
            }
        )
        hosts = f" ({', '.join(self.hosts)})" if self.hosts else ""
        detail = f"{self.state}: {self.inp.group.name}, {len(self.worker_ids)} hosts{hosts}"
        workflow.set_current_details(f"{detail}; {self.error}" if self.error else detail)
        if self.inp.notify:
            update = SliceUpdate(self.inp.slice_id, self.inp.group.name, self.state, self.worker_ids,
                                 self.error, self.error_type, workflow.now().timestamp(), self.placement)  # fmt: skip
            try:
                await workflow.get_external_workflow_handle(self.inp.notify).signal(SLICE_STATE, update)
            except Exception as err:  # the autoscaler recovers slice states from visibility when it starts
                workflow.logger.warning("slice %s: autoscaler not told: %s", self.inp.slice_id, err)

    # -- handlers -------------------------------------------------------------------------------

    @workflow.signal(name=SCALE_DOWN)
    def request_scale_down(self, request: ScaleDown) -> None:
        """Scale this slice down (idempotent: the first request's drain timeout holds).

        A request that is not idle-only (`iris slice terminate`) overrides an idle-only one.
        """
        if self.scale_down is None or (self.scale_down.only_if_idle and not request.only_if_idle):
            self.scale_down = request

    @workflow.query
    def current_state(self) -> str:
        return str(self.state)
