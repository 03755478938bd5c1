"""Signals sent by a local activity instead of by workflow commands.

A signal a workflow sends itself costs its history two events and, when the
server confirms delivery, one more workflow task. The scheduler announces every
placement and a job enqueues itself that way on the hot path of each job, so
they send their signals through this local activity instead: one marker in the
sender's history per batch, and no workflow task for the reply.

Every signal sent here is idempotent at its receiver (keyed by task and
attempt), so a batch that is retried after a partial failure does no harm.

Enqueues to the scheduler are coalesced per process: while one is on its way,
the next ones wait and leave together as one `enqueue_batch` signal. Idle, an
enqueue goes at once; in a storm, the singleton takes a few signals a second
instead of one per job (one signal per job at 300 jobs/s kept its workflow tasks
force-closed, >100 signals buffered during each, until a run passed the server's
10,000-signal limit).
"""

from __future__ import annotations

import asyncio
import weakref

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.coalescer import SignalCoalescer
from activities.contracts import DELIVER_SIGNALS, ENQUEUE, ENQUEUE_BATCH, Delivery

MAX_IN_FLIGHT = 64  # concurrent signal RPCs per batch
MAX_ENQUEUE_BATCH = 500  # enqueues per batch signal (~150 KB of JSON; the payload limit is 2 MB)


_coalescers: weakref.WeakKeyDictionary[Client, dict[str, SignalCoalescer]] = weakref.WeakKeyDictionary()


def coalescer(client: Client, workflow_id: str) -> SignalCoalescer:
    """The process's coalescer for enqueues to `workflow_id` through `client`."""
    by_workflow = _coalescers.setdefault(client, {})
    found = by_workflow.get(workflow_id)
    if found is None:
        found = by_workflow[workflow_id] = SignalCoalescer(client, workflow_id, ENQUEUE_BATCH, MAX_ENQUEUE_BATCH)
    return found


@activity.defn(name=DELIVER_SIGNALS)
async def deliver_signals(deliveries: list[Delivery]) -> list[int]:
    """Send every signal; return the indices whose workflow no longer runs (or never existed).

    Any other error fails the activity, and Temporal retries the whole batch.
    """
    return await send_signals(activity.client(), deliveries)


async def send_signals(client: Client, deliveries: list[Delivery]) -> list[int]:
    """What `deliver_signals` does, with the client given."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def send(index: int, delivery: Delivery) -> int | None:
        async with gate:
            try:
                if delivery.signal == ENQUEUE:
                    await coalescer(client, delivery.workflow_id).send(delivery.arg)
                else:
                    await client.get_workflow_handle(delivery.workflow_id).signal(delivery.signal, delivery.arg)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return index
                raise
        return None

    outcomes = await asyncio.gather(*(send(i, d) for i, d in enumerate(deliveries)))
    return [i for i in outcomes if i is not None]
