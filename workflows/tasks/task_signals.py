"""How a task workflow signals other workflows: without waiting, or again with backoff until delivered.

Workflow code (sandboxed, deterministic): the waits are durable timers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow

ENQUEUE_BACKOFF_MAX = 60.0  # seconds between attempts to deliver a refused signal, at most


async def send_and_go_on(handle: workflow.ExternalWorkflowHandle[Any], signal: str, arg: Any) -> None:
    """Signal without waiting for delivery, which would cost a workflow task.

    Only for a workflow that goes on running: the server drops a signal
    whose sender has completed by the time it is delivered. The yield lets
    the signal issue its command in this workflow task.
    """
    asyncio.get_running_loop().create_task(handle.signal(signal, arg))
    await asyncio.sleep(0)


async def until_delivered(
    target: workflow.ExternalWorkflowHandle[Any], signal: str, arg: Any, wanted: Callable[[], bool]
) -> None:
    """Signal `target`; while the server refuses (no such workflow yet, its signal limit), again with
    backoff, as long as `wanted()` still holds."""
    delay = 1.0
    while True:
        try:
            await target.signal(signal, arg)
            return
        except Exception as err:
            if not wanted():
                return
            workflow.logger.warning("%s refused, again in %gs: %s", signal, delay, err)
            await workflow.sleep(delay)
            delay = min(delay * 2, ENQUEUE_BACKOFF_MAX)
