"""An attempt's lease, renewed only by heartbeats Temporal has recorded (docs/reliability.md, "Leases").

Why the agent sends `run_task`'s heartbeats itself rather than through ``activity.heartbeat()``: the
SDK forwards those in the background and never says whether the server got them, and a lease may
only be renewed by a heartbeat the server has recorded. The server times an attempt out
``heartbeat_timeout`` after the last heartbeat it received; a renewal written as
``(when that heartbeat was sent) + lease`` therefore never outlives what the server has seen by more
than ``lease``, however long the agent is frozen, cut off or dead afterwards, and the task workflow
waits that long (plus a margin) before the attempt runs elsewhere. The heartbeats are the ones the
agent sent anyway (one every ``interval``): renewing costs no traffic of its own.

What the server answers is acted on here where it can be: an attempt whose workflow asked to cancel
it, or which no longer exists there, is stopped at once (``stop``) rather than when the SDK's own,
throttled heartbeat learns it. A pause or a reset is left to the SDK, which reports them its way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

import structlog
from temporalio import activity
from temporalio.api.common.v1 import Payloads
from temporalio.api.workflowservice.v1 import RecordActivityTaskHeartbeatRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import ATTEMPT_STOPPED, LEASED
from worker_agent.leases.lease_settings import DEFAULT_LEASE_MARGIN_SECONDS, DEFAULT_LEASE_SECONDS, LeaseSettings
from worker_agent.leases.lease_watchdog import lease_clock

__all__ = [
    "DEFAULT_LEASE_MARGIN_SECONDS", "DEFAULT_LEASE_SECONDS", "AttemptLease", "Beat", "LeaseSettings", "run_leased",
]  # fmt: skip
_T = TypeVar("_T")

log = structlog.get_logger("iris.lease")


class Beat(StrEnum):
    """What the server made of one heartbeat."""

    RECORDED = "recorded"  # renewed
    CANCELLED = "cancelled"  # recorded, and the workflow asked to cancel the attempt: stopped now
    STOP = "stop"  # recorded, and the attempt was paused or reset: the SDK is told
    GONE = "gone"  # the attempt no longer exists there (timed out, its workflow ended): stopped now
    UNREACHABLE = "unreachable"  # no answer: not renewed


class AttemptLease:
    """Heartbeats one attempt to Temporal and renews its lease on each recorded heartbeat.

    ``run()`` beats every ``settings.interval`` until cancelled. ``fresh()`` returns once a recorded
    heartbeat left at least one interval of lease (start the task then, with ``deadline``);
    ``renew`` is called with each new deadline (the runtime moves the task's lease), ``stop`` once when a
    heartbeat finds the attempt cancelled or gone (``ended`` says which). ``progress``
    gives what the heartbeat says of the attempt (LEASED, then PROCESS_STARTED and its use so far);
    with ``fenced`` (the runtime kills tasks whose lease ran out) every heartbeat also carries the
    lease, which the task workflow waits out before it runs the attempt elsewhere.
    """

    def __init__(self, client: Client, settings: LeaseSettings, *, fenced: bool) -> None:
        self.client = client
        self.settings = settings
        self.fenced = fenced
        self.progress: Callable[[], Sequence[Any]] = lambda: [LEASED]
        self.deadline = 0.0  # on lease_clock(): past it the attempt must be dead
        self.renew: Callable[[float], None] = lambda deadline: None
        self.stop: Callable[[], object] = lambda: None
        self.ended: Beat | None = None  # CANCELLED or GONE once `stop` was called
        self._renewed = asyncio.Event()
        self._poked = asyncio.Event()
        self._token = activity.info().task_token

    def details(self) -> list[Any]:
        """What the next heartbeat carries."""
        progress = list(self.progress())
        return [*progress, self.settings.detail()] if self.fenced else progress

    async def fresh(self) -> float:
        """Wait until a recorded heartbeat leaves at least one interval of lease; the deadline."""
        while self.deadline - lease_clock() < self.settings.interval:
            self._renewed.clear()
            await self._renewed.wait()
        return self.deadline

    async def run(self) -> None:
        """Beat and renew until cancelled, or until a beat finds the attempt cancelled or gone (then `stop`).

        The SDK's core cancels an activity on its own when its heartbeat API has not been called for the
        heartbeat timeout: so it gets one per beat, which it forwards to the server as well, no more often
        than its throttle (8 s on the task queue). Those renew nothing here.
        """
        while True:
            beat = await self.beat()
            if beat in (Beat.CANCELLED, Beat.GONE):
                self.ended = beat
                self.stop()
                return
            activity.heartbeat(*self.details())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self.settings.interval)
            self._poked.clear()

    def poke(self) -> None:
        """Send the next heartbeat now (the task just started: the server should know at once)."""
        self._poked.set()

    async def beat(self) -> Beat:
        """Send one heartbeat; when the server records it, renew the lease from when it was sent."""
        details = self.details()
        sent = lease_clock()
        try:
            payloads = await self.client.data_converter.encode(details)
            request = RecordActivityTaskHeartbeatRequest(
                task_token=self._token, details=Payloads(payloads=payloads),
                identity=self.client.identity, namespace=self.client.namespace,
            )  # fmt: skip
            response = await self.client.workflow_service.record_activity_task_heartbeat(
                request, retry=False, timeout=timedelta(seconds=max(self.settings.interval, 1.0))
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return Beat.GONE
            log.warning("lease_heartbeat_failed", error=str(err), status=err.status.name)
            return Beat.UNREACHABLE
        except Exception as err:  # no answer at all (connection lost, timed out): not renewed
            log.warning("lease_heartbeat_failed", error=str(err) or type(err).__name__)
            return Beat.UNREACHABLE
        self.deadline = max(self.deadline, sent + self.settings.seconds)
        self._renewed.set()
        with contextlib.suppress(OSError):  # the task is gone meanwhile: nothing left to renew
            self.renew(self.deadline)
        if response.activity_paused or response.activity_reset:
            return Beat.STOP
        return Beat.CANCELLED if response.cancel_requested else Beat.RECORDED


async def run_leased(lease: AttemptLease, work: Coroutine[Any, Any, _T]) -> _T:
    """Run an attempt's `work` while `lease` beats for it; a beat that finds the attempt cancelled or gone
    stops the work at once (the SDK would learn a cancel only with its own throttled heartbeat).

    The SDK's own cancel (or its shutdown) is re-raised, reported the SDK's way. A stop on the lease's word
    ends the activity with an ATTEMPT_STOPPED error, since the SDK has not heard of the cancel and would
    report a bare CancelledError as a failure with a traceback; the workflow reads it as what it asked
    (a kill, an eviction), or is gone.
    """
    task = asyncio.create_task(work)
    lease.stop = task.cancel
    beating = asyncio.create_task(lease.run())  # the first heartbeat goes out while the task is prepared
    try:
        return await task
    except asyncio.CancelledError:
        if lease.ended is None or activity.is_cancelled():
            raise
        what = "cancelled by its workflow" if lease.ended == Beat.CANCELLED else "gone"
        raise ApplicationError(f"attempt stopped: {what}", type=ATTEMPT_STOPPED, non_retryable=True,
                               category=ApplicationErrorCategory.BENIGN) from None  # fmt: skip
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
