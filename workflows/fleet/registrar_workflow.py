"""RegistrarWorkflow: agents' registrations handed on to the scheduler together, one signal at a time.

Every agent registers with a signal. Sent straight to the singleton scheduler, a storm of them (a fleet's agents
starting together) queues on the scheduler's lock in the Temporal server's history service: each signal holds the
workflow's lock in turn, and the scheduler's own workflow tasks complete only when their turn comes, behind every
signal that arrived while they ran (docs/performance.md, "Registrations through a registrar"). Sent here, the storm
queues on this workflow instead. It hands on what came in one signal (`register_worker_batches`) and waits for it
to be delivered before the next, so the scheduler's lock sees one registration signal at a time, however many
agents register. The scheduler answers each agent's monitor (`reply_to`) as before.

The controller starts it beside the scheduler. An agent that finds none (a controller of an earlier release)
signals the scheduler itself, as do an agent whose try went unanswered and a monitor whose signal here failed.
It continues as new when Temporal suggests it, with the batches not yet handed on.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.contracts import REGISTER_WORKER_BATCHES, REGISTER_WORKERS, SCHEDULER_WORKFLOW_ID
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import binary_payload

MAX_SIGNAL_BYTES = 512 * 1024  # one signal's batches at most (a payload may be 2 MiB); one batch always goes
NO_SCHEDULER_PAUSE = timedelta(seconds=1)  # before trying again when the scheduler is not there


@workflow.defn(name="RegistrarWorkflow", versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class RegistrarWorkflow:
    def __init__(self) -> None:
        self._waiting: list[pb.WorkerBatch] = []

    @workflow.signal(name=REGISTER_WORKERS)
    def register_workers(self, batch: pb.WorkerBatch) -> None:
        self._waiting.append(batch)

    @workflow.run
    async def run(self, carried: pb.WorkerBatches | None = None) -> None:
        if carried is not None:
            self._waiting[:0] = list(carried.batches)
        scheduler = workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID)
        while not workflow.info().is_continue_as_new_suggested():
            await workflow.wait_condition(lambda: bool(self._waiting))
            batches = self._take()
            try:
                await scheduler.signal(REGISTER_WORKER_BATCHES, binary_payload(batches))
            except Exception as err:  # no scheduler (yet): hand them on when it is there
                self._waiting[:0] = list(batches.batches)
                workflow.logger.warning("registrations not handed on, trying again: %s", err)
                await workflow.sleep(NO_SCHEDULER_PAUSE)
        workflow.continue_as_new(pb.WorkerBatches(batches=self._waiting))

    def _take(self) -> pb.WorkerBatches:
        """The oldest waiting batches, up to MAX_SIGNAL_BYTES (at least one)."""
        taken = pb.WorkerBatches()
        size = 0
        count = 0
        for batch in self._waiting:
            size += batch.ByteSize()
            if count and size > MAX_SIGNAL_BYTES:
                break
            count += 1
        taken.batches.extend(self._waiting[:count])
        del self._waiting[:count]
        return taken
