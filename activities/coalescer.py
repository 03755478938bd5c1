"""One signal for many: what queued while the last batch was on its way leaves together.

Idle, a message goes at once; in a storm, the receiver takes a few signals a second
instead of one per message. Each signal is an event in the receiver's history and
counts against its run's signal limit, and a singleton receiving one per job (or
per ended task) spends its workflow tasks on them. Used for the controller's
enqueues and the agent's releases, both to the scheduler.

In a storm a batch can go as an update instead (`update`, the controller's enqueues): a signal that
comes in while the receiver's workflow task continues as new makes the server refuse that close,
and the receiver replays its whole run to take the signal first (~1.2 s for the scheduler at 30,000
workers). A sender whose signals leave back to back, one as soon as the last is in, gets one into
nearly every close. The server does not refuse a close for an update: one not yet delivered is
handed to the next run (the client SDK sends it again), and one delivered to the task that
continued as new is refused by the receiver's validator (or dropped: the server then fails it), and
sent again here.

An update waits for the receiver's workflow task to take it, and a job's enqueue waits for it too
(200 one-task jobs from 16 threads went through at 14.2-14.8 jobs/s as updates, at 14.6-15.9 as
signals, alternating runs on a noisy machine). So batches go as updates only in a storm: from a
batch of UPDATE_FROM (what queued while the last was on its way: thousands of jobs a second) until
the queue is empty again, up to UPDATES_IN_FLIGHT at once. One the receiver does not take within
UPDATE_PATIENCE (its controller died) goes as a signal after all: a receiver of both must be
idempotent, as the scheduler's enqueues are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import RUN_HANDED_OVER

UPDATE_FROM = 32  # messages in one batch that start a storm: its batches go as updates until the queue empties
UPDATES_IN_FLIGHT = 4  # batches on their way at once as updates (the server takes at most 10 per workflow)
UPDATE_PATIENCE = 3.0  # seconds an update may wait for its receiver to take it before it goes as a signal
HANDED_OVER_PAUSE = 0.02  # before a refused update is sent again (doubling up to 0.5 s): the next run takes it

Waiting = tuple[Any, "asyncio.Future[None]"]
"""A message and the future its sender awaits."""


class SignalCoalescer:
    """Sends the messages for one workflow as signals `signal`, at most `max_batch` messages per signal, each
    signal's argument the batch as `pack` makes it (a list, unless told otherwise); with `update`, in a storm
    (from a batch of `update_from` messages until none waits) as that update."""

    def __init__(self, client: Client, workflow_id: str, signal: str, max_batch: int,
                 pack: Callable[[list[Any]], Any] = list, update: str | None = None,
                 update_from: int = UPDATE_FROM) -> None:  # fmt: skip
        self._handle = client.get_workflow_handle(workflow_id)
        self._signal = signal
        self._update = update
        self._update_from = update_from
        self._max_batch = max_batch
        self._pack = pack
        self._waiting: list[Waiting] = []
        self._sending = False
        self._drainer: asyncio.Task[None] | None = None

    async def send(self, message: Any) -> None:
        """Return once the batch holding `message` was accepted by the server; raise what refused it."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((message, done))
        if not self._sending:
            self._sending = True
            self._drainer = asyncio.ensure_future(self._drain())
        await done

    def _packed(self, batch: list[Waiting]) -> tuple[Any, list[Waiting]]:
        """The signal's argument and the messages in it: those `pack` refuses are left out and their senders get
        the refusal, so one malformed message fails its own sender, not every sender coalesced with it (their
        retries would meet it again)."""
        try:
            return self._pack([message for message, _ in batch]), batch
        except Exception:  # find which: each message alone
            good = []
            for message, done in batch:
                try:
                    self._pack([message])
                except Exception as err:
                    if not done.done():
                        done.set_exception(err)
                else:
                    good.append((message, done))
            return (self._pack([message for message, _ in good]) if good else None), good

    async def _drain(self) -> None:
        """Send batches until none waits: one at a time, or in a storm up to UPDATES_IN_FLIGHT updates (each
        waits for its receiver's workflow task; the server delivers the ones waiting together)."""
        in_flight: set[asyncio.Task[None]] = set()
        storm = False
        try:
            while self._waiting or in_flight:
                if self._waiting and len(in_flight) < (UPDATES_IN_FLIGHT if storm else 1):
                    batch, self._waiting = self._waiting[: self._max_batch], self._waiting[self._max_batch :]
                    storm = storm or (self._update is not None and len(batch) >= self._update_from)
                    arg, batch = self._packed(batch)
                    if batch:
                        in_flight.add(asyncio.ensure_future(self._send_batch(arg, batch, storm)))
                    continue
                _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._sending = False

    async def _send_batch(self, arg: Any, batch: list[Waiting], as_update: bool) -> None:
        try:
            if not (as_update and self._update is not None and await self._updated(self._update, arg)):
                await self._handle.signal(self._signal, arg)
        except Exception as err:  # every sender of the batch sees the refusal and decides
            for _, done in batch:
                if not done.done():  # its sender may have been cancelled meanwhile
                    done.set_exception(err)
        else:
            for _, done in batch:
                if not done.done():
                    done.set_result(None)

    async def _updated(self, update: str, arg: Any) -> bool:
        """Send `arg` as `update`: True once the receiver took it; False if it did not within UPDATE_PATIENCE, or
        its workflow is not there, and the batch should go as a signal (which then says so).

        Sent again after a pause when refused for the moment: by a run that had handed its state to the next
        (RUN_HANDED_OVER), or by the server (an update its run's closing task dropped, its limits). What the
        receiver refuses for itself (an unreadable batch) is raised: a signal would be dropped for it too.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + UPDATE_PATIENCE
        pause = HANDED_OVER_PAUSE
        while (left := deadline - loop.time()) > 0:
            try:
                await self._handle.execute_update(update, arg, rpc_timeout=timedelta(seconds=left))
                return True
            except WorkflowUpdateFailedError as err:
                if not (isinstance(err.cause, ApplicationError) and err.cause.type == RUN_HANDED_OVER):
                    raise
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # our own cancellation, not the RPC's deadline
                    raise
                return False
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, 0.5)
        return False
