"""A plain job's continue-as-new with its tasks still running (Temporal's sliding window).

Its tasks are started with ParentClosePolicy.ABANDON and send their result to the job's workflow
id (TASK_ENDED), which reaches whichever run is current; the next run takes over the table, the
open tasks and the waves (`pb.JobHandover`), watches the tasks it adopted and cancels them by
their workflow ids.
"""

from __future__ import annotations

import asyncio
import zlib
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        FIND_LOST_TASKS,
        LostTask,
        task_workflow_id,
    )
    from activities.proto import cluster_pb2 as pb
    from workflows.job_base import JobBase
    from workflows.job_lifecycle import JobPhase
    from workflows.messages import (
        TaskResult,
    )
    from workflows.states import TaskState
    from workflows.visibility import (
        MAX_JOB_ERROR_CHARS,
        cap_text,
        compact_status,
    )

# A plain job that may outgrow one history continues as new on the server's suggestion, its running
# tasks handed over to the next run (see the module docstring). A job's history takes ~4 events per
# task and ~2-4 per retry; Temporal ends a history at 51,200 events.
HANDOVER_ATTEMPTS = 5_000  # a plain job whose budgets allow more attempts than this may hand over
# A run that adopted tasks checks for adopted tasks whose workflow closed without reporting
# (terminated or failed from outside), which would hang the job: first after LOST_TASK_CHECK, then
# twice as long each time up to LOST_TASK_CHECK_MAX (a long-running job pays ~11 events per check).
LOST_TASK_CHECK = timedelta(seconds=10)
LOST_TASK_CHECK_MAX = timedelta(minutes=10)


def pack_handover(handover: pb.JobHandover) -> bytes:
    """Binary protobuf, compressed: a 10,000-row table is ~2 MB as Temporal's default JSON
    (its payload limit) and ~100 KB this way, in ~15 ms."""
    return zlib.compress(handover.SerializeToString(), 1)


def unpack_handover(data: bytes) -> pb.JobHandover:
    return pb.JobHandover.FromString(zlib.decompress(data))


class Handover(JobBase):
    """Mixed into JobWorkflow (see its module)."""

    def _take_over(self, handover: pb.JobHandover) -> None:
        """Begin where the previous run of this plain job left off (it continued as new)."""
        self.table.take_over(handover.status)
        self._open = set(handover.open_tasks)
        self._next_task = handover.next_task
        self._handover = True
        self.tree.has_children = handover.has_children
        self.memo.published = self.table.view()  # the memo and search attributes came along with continue-as-new

    async def _watch_adopted(self) -> None:
        """Record adopted tasks whose workflow closed without sending TASK_ENDED.

        A task started by an earlier run is no child of this one: if it is terminated (Terminate
        in the UI) or its workflow fails, nothing reaches the job, which would wait forever. A
        child of this run ends through its handle instead (`_child_result`).
        """
        job_id = workflow.info().workflow_id
        pause = LOST_TASK_CHECK
        while True:
            await workflow.sleep(pause)
            pause = min(pause * 2, LOST_TASK_CHECK_MAX)
            adopted = sorted(self._open.difference(self._children))
            if not adopted:
                return
            lost = await workflow.execute_activity(
                FIND_LOST_TASKS, args=[job_id, adopted], result_type=list[LostTask],
                start_to_close_timeout=timedelta(minutes=2),
            )  # fmt: skip
            for task in lost:
                row = self.table.status.tasks[task.index]
                error = f"task workflow {task.status.lower()} without reporting its end"
                self._ended.append((task.index, TaskResult(
                    task_index=task.index, state=TaskState.KILLED, worker_id=row.worker_id, attempt=row.attempt,
                    failure_count=row.failure_count, preemption_count=row.preemption_count, error=error,
                )))  # fmt: skip
                if not self.table.status.error:
                    self.table.status.error = cap_text(f"task {task.index} killed: {error}", MAX_JOB_ERROR_CHARS)

    def _handover_due(self) -> bool:
        """The server suggests a new run, and this job has tasks to hand over.

        A job being killed or failing winds down in this run: it only waits for its open tasks.
        """
        return (
            self._handover and bool(self._open) and self._phase is JobPhase.ACTIVE
            and workflow.info().is_continue_as_new_suggested()
        )  # fmt: skip

    async def _continue_as_new(self) -> None:
        """Hand the job over to a new run with its tasks still running."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._record_ended()
        if not self._handover_due():
            return
        handover = pb.JobHandover(
            status=compact_status(self.table.status), open_tasks=sorted(self._open),
            next_task=self._next_task, has_children=self.tree.has_children,
        )  # fmt: skip
        self.memo.flush()
        workflow.logger.info("job %s continues as new with %d tasks open", self.table.status.job_id, len(self._open))
        workflow.continue_as_new(args=[self.req, None, pack_handover(handover)])

    async def _cancel_adopted(self, indexes: list[int]) -> None:
        """Cancel tasks an earlier run started; each then reports its end (KILLED) by signal."""
        job_id = workflow.info().workflow_id

        async def cancel(index: int) -> None:
            try:
                await workflow.get_external_workflow_handle(task_workflow_id(job_id, index)).cancel()
            except Exception as err:  # it ended meanwhile; its TASK_ENDED signal is on the way
                workflow.logger.info("task %d of %s not cancelled: %s", index, job_id, err)

        cancels = [cancel(i) for i in indexes]
        try:
            await asyncio.gather(*cancels)
        finally:
            # A run that ends (or is evicted) in the activation that made them never starts them:
            # close those so they are not left to the garbage collector as never awaited.
            for pending in cancels:
                pending.close()
