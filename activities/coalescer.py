"""One signal for many: what queued while the last batch was on its way leaves together.

Idle, a message goes at once; in a storm, the receiver takes a few signals a second
instead of one per message. Each signal is an event in the receiver's history and
counts against its run's signal limit, and a singleton receiving one per job (or
per ended task) spends its workflow tasks on them. Used for the controller's
enqueues and the agent's releases, both to the scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.client import Client

Waiting = tuple[Any, "asyncio.Future[None]"]
"""A message and the future its sender awaits."""


class SignalCoalescer:
    """Sends the messages for one workflow as signals `signal`, at most `max_batch` messages per signal, each
    signal's argument the batch as `pack` makes it (a list, unless told otherwise)."""

    def __init__(self, client: Client, workflow_id: str, signal: str, max_batch: int,
                 pack: Callable[[list[Any]], Any] = list) -> None:
        self._handle = client.get_workflow_handle(workflow_id)
        self._signal = signal
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
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[: self._max_batch], self._waiting[self._max_batch :]
                arg, batch = self._packed(batch)
                if not batch:
                    continue
                try:
                    await self._handle.signal(self._signal, arg)
                except Exception as err:  # every sender of the batch sees the refusal and decides
                    for _, done in batch:
                        if not done.done():  # its sender may have been cancelled meanwhile
                            done.set_exception(err)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._sending = False
