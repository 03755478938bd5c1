"""RegistrarWorkflow: agents' registrations handed on to the scheduler together, one signal at a time.

Every agent registers with a signal. Sent straight to the singleton scheduler, a storm of them (a fleet's agents
starting together) queues on the scheduler's lock in the Temporal server's history service: each signal holds the
workflow's lock in turn, and the scheduler's own workflow tasks complete only when their turn comes, behind every
signal that arrived while they ran (docs/performance.md, "Registrations through a registrar"). Sent here, the storm
queues on this workflow instead. It hands on the batches that came meanwhile in one signal
(`register_worker_batches`) and waits for it to be delivered before the next, so the scheduler's lock sees one
registration signal at a time, however many agents register. The scheduler answers each agent's monitor
(`reply_to`) as before.

A session's end (`worker_lost`, from its monitor) comes this way too and is handed on in its place among the
registrations: sent straight, it could overtake its own session's registration held here (a controller back from
an outage runs both at once), and the scheduler would take the hosts of an ended session for healthy.

The controller starts it beside the scheduler. An agent that finds none (a controller of an earlier release)
signals the scheduler itself, as does an agent whose try went unanswered, and a monitor whose signal here failed.
It continues as new when Temporal suggests it, with what it has not handed on yet.
"""

from __future__ import annotations

import base64
from datetime import timedelta

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.contracts import REGISTER_WORKER_BATCHES, REGISTER_WORKERS, SCHEDULER_WORKFLOW_ID, WORKER_LOST
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import binary_payload
    from workflows.messages import RegistrarCarry, RegistrarItem, WorkerLost

MAX_SIGNAL_BYTES = 512 * 1024  # one signal's batches at most (a payload may be 2 MiB); one batch always goes
NO_SCHEDULER_RETRY_AFTER = timedelta(seconds=1)  # before trying again when the scheduler is not there

Held = pb.WorkerBatch | WorkerLost


@workflow.defn(name="RegistrarWorkflow", versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class RegistrarWorkflow:
    def __init__(self) -> None:
        self._waiting: list[Held] = []  # in arrival order

    @workflow.signal(name=REGISTER_WORKERS)
    def register_workers(self, batch: pb.WorkerBatch) -> None:
        self._waiting.append(batch)

    @workflow.signal(name=WORKER_LOST)
    def worker_lost(self, lost: WorkerLost) -> None:
        self._waiting.append(lost)

    @workflow.run
    async def run(self, carried: RegistrarCarry | None = None) -> None:
        if carried is not None:
            self._waiting[:0] = [_held(item) for item in carried.items]
        scheduler = workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID)
        while not workflow.info().is_continue_as_new_suggested():
            await workflow.wait_condition(lambda: bool(self._waiting))
            taken = self._take()
            try:
                if isinstance(taken[0], WorkerLost):
                    await scheduler.signal(WORKER_LOST, taken[0])
                else:
                    batches = pb.WorkerBatches(batches=[b for b in taken if isinstance(b, pb.WorkerBatch)])
                    await scheduler.signal(REGISTER_WORKER_BATCHES, binary_payload(batches))
            except Exception as err:  # no scheduler (yet): hand them on when it is there
                self._waiting[:0] = taken
                workflow.logger.warning("registrations not handed on, trying again: %s", err)
                await workflow.sleep(NO_SCHEDULER_RETRY_AFTER)
        workflow.continue_as_new(RegistrarCarry([_item(held) for held in self._waiting]))

    def _take(self) -> list[Held]:
        """The oldest waiting session end alone, or the oldest batches up to MAX_SIGNAL_BYTES (at least one)."""
        if isinstance(self._waiting[0], WorkerLost):
            return [self._waiting.pop(0)]
        size = count = 0
        for held in self._waiting:
            if isinstance(held, WorkerLost):
                break
            size += held.ByteSize()
            if count and size > MAX_SIGNAL_BYTES:
                break
            count += 1
        taken = self._waiting[:count]
        del self._waiting[:count]
        return taken


def _item(held: Held) -> RegistrarItem:
    if isinstance(held, WorkerLost):
        return RegistrarItem(lost=held)
    return RegistrarItem(batch=base64.b64encode(held.SerializeToString()).decode())


def _held(item: RegistrarItem) -> Held:
    return item.lost if item.lost is not None else pb.WorkerBatch.FromString(base64.b64decode(item.batch))
