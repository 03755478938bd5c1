"""What the parts of the job workflow share: its attributes, and the methods one part calls in another.

JobWorkflow mixes in Table, Waves and Handover (one concern per module) over this base; the
workflow class and its parts define the methods, these declarations only let each part be read
(and type-checked) alone.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio import workflow

    from activities.proto import cluster_pb2 as pb
    from workflows.job_lifecycle import JobEvent, JobPhase
    from workflows.job_table import JobMemo, TaskTable
    from workflows.job_tree import JobTree
    from workflows.messages import Enqueue, TaskResult


class JobBase:
    table: TaskTable
    memo: JobMemo
    req: pb.JobRequest
    _children: dict[int, workflow.ChildWorkflowHandle[Any, Any]]
    _phase: JobPhase  # what the job does while its tasks run (job_lifecycle)
    _kill_reason: str
    _gang_break: TaskResult | None  # the result that broke this gang attempt
    _next_task: int  # the next task index to start, for jobs started in waves
    _ended: deque[tuple[int, TaskResult | None]]  # ended tasks not recorded yet
    _open: set[int]  # tasks of a plain job started and not yet recorded as ended
    _handover: bool  # this job continues as new with its tasks running
    tree: JobTree  # the job's children (job_tree)




    def _record_ended(self) -> None:
        raise NotImplementedError

    def _cancel_running(self) -> None:
        raise NotImplementedError

    def _on(self, event: JobEvent, *, cause: TaskResult | None=None, attempt: int=0) -> None:
        raise NotImplementedError

    async def _enqueue(self, enqueue: Enqueue) -> None:
        raise NotImplementedError

    def _kill_unstarted(self) -> None:
        raise NotImplementedError




    async def _start_range(self, job_id: str, req: pb.JobRequest, attempt: int, end: int) -> None:
        raise NotImplementedError

    async def _continue_as_new(self) -> None:
        raise NotImplementedError

    def _handover_due(self) -> bool:
        raise NotImplementedError

    def _take_over(self, handover: pb.JobHandover) -> None:
        raise NotImplementedError

    async def _cancel_adopted(self, indexes: list[int]) -> None:
        raise NotImplementedError



    def kill(self, reason: str) -> None:
        raise NotImplementedError


    async def _watch_adopted(self) -> None:
        raise NotImplementedError
