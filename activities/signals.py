"""Signals sent by a local activity instead of by workflow commands.

A signal a workflow sends itself costs its history two events and, when the
server confirms delivery, one more workflow task. The scheduler announces every
placement and a job enqueues itself that way on the hot path of each job, so
they send their signals through this local activity instead: one marker in the
sender's history per batch, and no workflow task for the reply.

Every signal sent here is idempotent at its receiver (keyed by task and
attempt), so a batch that is retried after a partial failure does no harm.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import DELIVER_SIGNALS, Delivery

MAX_IN_FLIGHT = 64  # concurrent signal RPCs per batch


@activity.defn(name=DELIVER_SIGNALS)
async def deliver_signals(deliveries: list[Delivery]) -> list[int]:
    """Send every signal; return the indices whose workflow no longer runs (or never existed).

    Any other error fails the activity, and Temporal retries the whole batch.
    """
    client = activity.client()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def send(index: int, delivery: Delivery) -> int | None:
        async with gate:
            try:
                await client.get_workflow_handle(delivery.workflow_id).signal(delivery.signal, delivery.arg)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return index
                raise
        return None

    outcomes = await asyncio.gather(*(send(i, d) for i, d in enumerate(deliveries)))
    return [i for i in outcomes if i is not None]
