"""Heartbeats for activities that do one long thing: a stalled worker is noticed in seconds.

Why: without a heartbeat timeout an activity whose controller died is only retried when its
start-to-close timeout passes (two minutes for a scheduling pass), and the whole fleet waits
that long. With one, the server retries it on a live controller as soon as the beats stop.
Local activities are skipped: they die with their workflow task and are retried with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")

# Beat well inside the shortest heartbeat timeout callers use (5 s, the scheduler's own activities).
BEAT_SECONDS = 2.0


def _beats() -> bool:
    """Only a regular activity beats (a local one, or the function called outside any activity, does not)."""
    return activity.in_activity() and not activity.info().is_local


async def heartbeating(awaitable: Awaitable[T], every: float = BEAT_SECONDS) -> T:
    """Await `awaitable` while heartbeating every `every` seconds, so the activity is not taken for dead."""
    task = asyncio.ensure_future(awaitable)
    beats = _beats()
    while True:
        done, _ = await asyncio.wait({task}, timeout=every)
        if done:
            return task.result()
        if beats:
            activity.heartbeat()


@contextmanager
def heartbeating_thread(every: float = BEAT_SECONDS) -> Iterator[None]:
    """Heartbeat from a side thread while a sync activity computes (a pure pass cannot beat itself)."""
    if not _beats():
        yield
        return
    context = contextvars.copy_context()  # the activity's context: heartbeat() finds it there
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            context.run(activity.heartbeat)

    beater = threading.Thread(target=beat, name="activity-heartbeat", daemon=True)
    # Shielded: the SDK cancels a sync activity by an asynchronous exception aimed at this thread's id, and until
    # the new thread runs, CPython 3.11 gives it that id too; the exception then kills it before it says it
    # started, and start() waits forever (seen: a pass activity hung 10 minutes). Delivered after start() instead.
    try:
        with activity.shield_thread_cancel_exception():
            beater.start()
        yield
    finally:
        stop.set()
        if beater.ident is not None:  # started (a cancellation may come as the shield ends)
            beater.join()
