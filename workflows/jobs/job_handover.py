"""A plain job's continue-as-new with its tasks still running (Temporal's sliding window).

Its tasks are started with ParentClosePolicy.ABANDON and send their result to the job's workflow
id (TASK_ENDED), which reaches whichever run is current; the next run takes over the table, the
open tasks and the waves (`pb.JobHandover`), watches the tasks it adopted and cancels them by
their workflow ids.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow

from workflows.jobs.job_table import TaskTable  # the parts hold workflow code: sandboxed
from workflows.jobs.job_waves import TaskChildren, release_for

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        FIND_LOST_TASKS,
        LostTask,
        Release,
        task_workflow_id,
    )
    from activities.proto import cluster_pb2 as pb
    from activities.proto import compressed
    from workflows.memo import memo_now
    from workflows.messages import TaskResult
    from workflows.states import TaskState
    from workflows.visibility import (
        MAX_JOB_ERROR_CHARS,
        cap_text,
        compact_status,
    )

# A run that adopted tasks checks for adopted tasks whose workflow closed without reporting
# (terminated or failed from outside), which would hang the job: first after LOST_TASK_CHECK, then
# twice as long each time up to LOST_TASK_CHECK_MAX (a long-running job pays ~11 events per check).
LOST_TASK_CHECK = timedelta(seconds=10)
LOST_TASK_CHECK_MAX = timedelta(minutes=10)


def pack_handover(handover: pb.JobHandover) -> bytes:
    """Binary protobuf, compressed: a 10,000-row table is ~2 MB as Temporal's default JSON
    (its payload limit) and ~100 KB this way, in ~15 ms."""
    return compressed.compress(handover.SerializeToString())


def unpack_handover(data: bytes) -> pb.JobHandover:
    return pb.JobHandover.FromString(compressed.decompress(data, "job handover"))


async def watch_adopted(children: TaskChildren, table: TaskTable) -> None:
    """Record adopted tasks whose workflow closed without sending TASK_ENDED.

    A task started by an earlier run is no child of this one: if it is terminated (Terminate
    in the UI) or its workflow fails, nothing reaches the job, which would wait forever. A
    child of this run ends through its handle instead.
    """
    job_id = workflow.info().workflow_id
    pause = LOST_TASK_CHECK
    while True:
        await workflow.sleep(pause)
        pause = min(pause * 2, LOST_TASK_CHECK_MAX)
        adopted = children.adopted()
        if not adopted:
            return
        lost = await workflow.execute_activity(
            FIND_LOST_TASKS, args=[job_id, adopted], result_type=list[LostTask],
            start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=timedelta(seconds=10),
        )  # fmt: skip
        for task in lost:
            row = table.status.tasks[task.index]
            error = f"task workflow {task.status.lower()} without reporting its end"
            children.ended.append((task.index, TaskResult(
                task_index=task.index, state=TaskState.KILLED, worker_id=row.worker_id, attempt=row.attempt,
                failure_count=row.failure_count, preemption_count=row.preemption_count, error=error,
            )))  # fmt: skip
            if not table.status.error:
                table.status.error = cap_text(f"task {task.index} killed: {error}", MAX_JOB_ERROR_CHARS)
        if lost:  # none of them gave its place back (job_waves `ended_child`, for this run's children)
            await release_for([Release(job_id, t.index, table.status.tasks[t.index].attempt) for t in lost])


def handover_due(children: TaskChildren, active: bool) -> bool:
    """The server suggests a new run, and this job has tasks to hand over.

    A job being killed or failing (not `active`) winds down in this run: it only waits for its open tasks.
    """
    return children.handover and bool(children.open) and active and workflow.info().is_continue_as_new_suggested()


def hand_over(req: pb.JobRequest, table: TaskTable, children: TaskChildren, has_children: bool) -> NoReturn:
    """Continue as new with the job's tasks still running: the next run takes over the table and the open tasks."""
    handover = pb.JobHandover(
        status=compact_status(table.status), open_tasks=sorted(children.open),
        next_task=children.next_task, has_children=has_children,
    )  # fmt: skip
    workflow.logger.info("job %s continues as new with %d tasks open", table.status.job_id, len(children.open))
    workflow.continue_as_new(args=[req, None, pack_handover(handover)], memo=memo_now())  # as published now


async def cancel_adopted(indexes: list[int]) -> None:
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
