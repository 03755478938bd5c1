"""Signals sent by a local activity instead of by workflow commands.

A signal a workflow sends itself costs its history two events and, when the
server confirms delivery, one more workflow task. The scheduler announces every
placement and a job enqueues itself that way on the hot path of each job, so
they send their signals through this local activity instead: one marker in the
sender's history per batch, and no workflow task for the reply.

Every signal sent here is idempotent at its receiver (keyed by task and
attempt), so a batch that is retried after a partial failure does no harm.

A small job enqueues its tasks while it starts them, so an assignment can reach
a task before the task exists: a task that is not there yet, of a job still
running, is waited for (ASSIGN_PATIENCE) rather than reported gone. The
scheduler's announcement (`deliver_assignments`) waits only a short grace and
hands such an assignment back as late, so one job whose children are slow to
start (its controller died between its enqueue and their start) does not hold
the scheduling of everything else; the scheduler waits for the late ones in the
background, with more patience.

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
from typing import Any

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.coalescer import SignalCoalescer
from activities.contracts import (
    ASSIGNED,
    DELIVER_ASSIGNMENTS,
    DELIVER_SIGNALS,
    ENQUEUE,
    ENQUEUE_BATCH,
    Delivery,
    DeliveryOutcome,
    job_of_task,
)
from activities.contracts.announcing import AssignmentBatch
from activities.contracts.queueing import EnqueueBatch
from activities.heartbeat import heartbeating

MAX_IN_FLIGHT = 64  # concurrent signal RPCs per batch
MAX_ENQUEUE_BATCH = 500  # enqueues per batch signal (~30 KB of JSON as columns for ten-task jobs; the limit is 2 MB)
# How long an assignment waits for a task whose job is still running to start: longer than a
# workflow task's timeout (10 s), so a job whose controller died between its enqueue and its
# children's start is retried and starts them before the place is given back.
ASSIGN_PATIENCE = 30.0


log = structlog.get_logger("iris.signals")

_coalescers: weakref.WeakKeyDictionary[Client, dict[str, SignalCoalescer]] = weakref.WeakKeyDictionary()


def coalescer(client: Client, workflow_id: str) -> SignalCoalescer:
    """The process's coalescer for enqueues to `workflow_id` through `client`."""
    by_workflow = _coalescers.setdefault(client, {})
    found = by_workflow.get(workflow_id)
    if found is None:
        found = by_workflow[workflow_id] = SignalCoalescer(client, workflow_id, ENQUEUE_BATCH, MAX_ENQUEUE_BATCH,
                                                           pack=EnqueueBatch.of)
    return found


@activity.defn(name=DELIVER_SIGNALS)
async def deliver_signals(deliveries: list[Delivery], report_sent: bool = False) -> list[int] | dict[str, Any]:
    """Send every signal; return the indices whose workflow no longer runs (or never will: an
    assignment waits for a task its running job is starting).

    With `report_sent` (the scheduler's registration answers), `{"gone": [...], "sent": n}`: the answers
    it was given, recorded in history, so a replay counts off exactly those as sent, whatever else the
    replaying workflow had owed by then (docs/reliability.md, "Replays"). Called with one argument, the
    SDK leaves `deliveries` untyped: rows are typed here.

    Any other error fails the activity, and Temporal retries the whole batch.
    """
    typed = [d if isinstance(d, Delivery) else Delivery(**d) for d in deliveries]
    outcome = await heartbeating(send_signals(activity.client(), typed, ASSIGN_PATIENCE))
    gone = sorted(outcome.gone + outcome.late)
    return {"gone": gone, "sent": len(typed)} if report_sent else gone


@activity.defn(name=DELIVER_ASSIGNMENTS)
async def deliver_assignments(deliveries: AssignmentBatch, patience: float) -> DeliveryOutcome:
    """As `deliver_signals`, but an assignment whose task has not started after `patience` seconds,
    while its job runs, comes back as late rather than gone (the scheduler's announcement waits a
    short grace; it waits longer in the background). Both arguments are always sent: Temporal
    types an activity's arguments only when as many come as it declares. The outcome's indices are
    positions in `deliveries.deliveries()`."""
    return await heartbeating(send_signals(activity.client(), deliveries.deliveries(), patience))


async def send_signals(client: Client, deliveries: list[Delivery], patience: float) -> DeliveryOutcome:
    """Send every signal: an assignment to a task its running job has not started yet waits up to
    `patience` seconds for it; the indices gone and (assignments still waiting) late."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def send(delivery: Delivery) -> bool | None:
        """True: delivered; False: its workflow is gone; None: its task is not there yet."""
        async with gate:
            if delivery.signal == ENQUEUE:
                await coalescer(client, delivery.workflow_id).send(delivery.arg)
                return True
            if await _signal(client, delivery):
                return True
        if delivery.signal != ASSIGNED:
            return False
        started = asyncio.get_running_loop().time()
        running = await _task_starting(client, delivery.workflow_id, patience)
        delivered = await _signal(client, delivery) if running else running
        waited_ms = round((asyncio.get_running_loop().time() - started) * 1000, 1)
        log.info("assignment_waited_for_task", task_id=delivery.workflow_id, delivered=delivered, waited_ms=waited_ms)
        return delivered

    outcomes = await asyncio.gather(*(send(d) for d in deliveries))
    return DeliveryOutcome(
        gone=[i for i, o in enumerate(outcomes) if o is False], late=[i for i, o in enumerate(outcomes) if o is None]
    )


async def _signal(client: Client, delivery: Delivery) -> bool:
    """Send one signal; False when its workflow does not run (closed or not started)."""
    try:
        await client.get_workflow_handle(delivery.workflow_id).signal(delivery.signal, delivery.arg)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def _task_starting(client: Client, task_id: str, patience: float) -> bool | None:
    """Wait up to `patience` seconds for the task workflow `task_id` to start: True once it runs, False if
    it ended or its job is not running, None if it is still not there (its job running) at the end.

    A task its job has not started yet always has a running job: the job enqueues its tasks in the
    same workflow task that starts them.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    delay = 0.01
    while True:
        status = await _status(client, task_id)
        if status is not None:
            return status == WorkflowExecutionStatus.RUNNING
        if await _status(client, job_of_task(task_id)) != WorkflowExecutionStatus.RUNNING:
            return False
        if loop.time() + delay > deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def _status(client: Client, workflow_id: str) -> WorkflowExecutionStatus | None:
    """The latest run's status, None if there is no such workflow."""
    try:
        return (await client.get_workflow_handle(workflow_id).describe()).status
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
