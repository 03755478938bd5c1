"""The job workflow's task children: started in batches, a large plain job's in waves, and enqueued.

A task child stays "pending" for Temporal until it ends, and a workflow may have at most 2,000
pending children: a large plain job keeps open only a little more children than it runs, and
starts the next wave as places free up.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RawValue, SearchAttributePair, TypedSearchAttributes

from workflows.job_handover import HANDOVER_ATTEMPTS

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CONTROL_TASK_QUEUE,
        DELIVER_SIGNALS,
        ENQUEUE,
        SCHEDULER_WORKFLOW_ID,
        TASK_KIND,
        Delivery,
        task_workflow_id,
    )
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import constraint_fields
    from workflows.job_base import JobBase
    from workflows.job_lifecycle import JobPhase
    from workflows.messages import (
        ConstraintSpec,
        Enqueue,
        SchedulingSpec,
        TaskInput,
        TaskResult,
    )
    from workflows.states import TaskState
    from workflows.task_workflow import TASK_WORKFLOW
    from workflows.visibility import KIND

START_BATCH = 500  # children started per batch: Temporal allows 2,000 pending per workflow
# A task child stays "pending" for Temporal until it ends, and a workflow may have at most 2,000
# pending children: a larger job starts its tasks in waves, at most MAX_PENDING_CHILDREN at once.
MAX_PENDING_CHILDREN = 1_000
# A large plain job keeps open only a little more task children than it runs. Every open child
# costs on each of the job's events: a 10,000-task job of `true` on 320 slots ran at 11.5 tasks/s
# with 1,000 open and at 22.3 tasks/s with 400. Open children include the running ones, so the cap
# still grows to MAX_PENDING_CHILDREN on a fleet that runs that many.
WAVE_FLOOR = 400  # open children of a large job while few of its tasks run
WAVE_AHEAD = 200  # open children beyond the job's running tasks (queued, placed, starting)
WAVE_STEP = 200  # the next wave starts once this many places are free under the cap
# A small job enqueues its tasks in the workflow task that starts them, not in the next one, which
# takes ~20-30 ms off submit-to-running; the assignment can then reach a task before it exists, and
# the scheduler's delivery waits for it (activities/signals.py). Hundreds of children take seconds
# to start on a loaded server, so only a small first batch goes this way.
EARLY_ENQUEUE_MAX = 32  # tasks


def scheduling_spec(req: pb.JobRequest) -> SchedulingSpec:
    constraints = []
    for c in req.constraints:
        constraints.append(ConstraintSpec(*constraint_fields(c)))
    return SchedulingSpec(
        cpu_millis=req.resources.cpu_millis,
        memory_bytes=req.resources.memory_bytes,
        gpus=req.resources.gpus,
        tpus=req.resources.tpus,
        constraints=constraints,
        group_by=req.coschedule_group_by,
        priority=req.priority,
        scheduling_timeout_seconds=req.scheduling_timeout_seconds,
        tolerations=list(req.tolerations),
        num_groups=max(1, req.coschedule_num_groups),
        ports=list(req.ports),
        coordinator=req.replicas > 1,
        band=req.band,
        user=req.user,
        max_concurrent=req.max_concurrent,
    )


def may_outgrow_history(req: pb.JobRequest) -> bool:
    """Whether a plain job can take more events than one history holds (decided once, from its request).

    Every attempt the budgets allow counts, preemptions too: 5,000 attempts at ~4-8 events each stay
    inside one history. Small jobs with small budgets keep the cheaper shape: no marker, no extra
    signal per task.
    """
    attempts = req.replicas * (1 + req.max_retries_failure + req.max_retries_preemption)
    return req.replicas > WAVE_FLOOR or attempts > HANDOVER_ATTEMPTS


def _note_end(ended: deque[tuple[int, TaskResult | None]], index: int, _handle: object) -> None:
    """Done-callback of a plain job's child: queue its index for `_collect_plain`."""
    ended.append((index, None))


class Waves(JobBase):
    """Mixed into JobWorkflow (see its module)."""

    async def _start_tasks(self, job_id: str, req: pb.JobRequest, attempt: int) -> None:
        """Start the task children (all of them, or a first wave for a large job) and enqueue them."""
        self._next_task = 0
        end = req.replicas
        if not req.coschedule_group_by:
            end = min(end, WAVE_FLOOR)
            self._handover = may_outgrow_history(req)
        await self._start_range(job_id, req, attempt, end)

    async def _start_next_wave(self) -> None:
        """Start more of a large job's tasks once a wave's worth of its pending children has ended."""
        req = self.req
        if self._next_task >= req.replicas or self._phase is not JobPhase.ACTIVE:
            return
        cap = self._open_cap()
        if len(self._open) > cap - WAVE_STEP:
            return
        end = min(req.replicas, self._next_task + cap - len(self._open))
        await self._start_range(workflow.info().workflow_id, req, 0, end)

    def _open_cap(self) -> int:
        """How many task children a large plain job keeps open: its running tasks and a margin."""
        running = self.table.counts.get(TaskState.RUNNING, 0)
        return min(MAX_PENDING_CHILDREN, max(WAVE_FLOOR, running + WAVE_AHEAD))

    def _wave_due(self) -> bool:
        """More of the job's tasks started running, so the cap grew by a wave (long tasks end rarely)."""
        return (
            self._next_task < self.req.replicas and self._phase is JobPhase.ACTIVE
            and len(self._open) <= self._open_cap() - WAVE_STEP
        )  # fmt: skip

    async def _start_range(self, job_id: str, req: pb.JobRequest, attempt: int, end: int) -> None:
        """Start task children `_next_task` .. `end` - 1 in batches, then enqueue them with one signal."""
        spec = scheduling_spec(req)
        gang = bool(req.coschedule_group_by)
        kind = req.entrypoint.WhichOneof("kind")
        argv = list(req.entrypoint.command.argv) if kind == "command" else []
        first = self._next_task
        enqueue = Enqueue(job_id, spec, dict.fromkeys(range(first, end), attempt), req.submitted_at)
        early: asyncio.Task[None] | None = None
        if first == 0 and not gang and end <= EARLY_ENQUEUE_MAX:
            early = asyncio.create_task(self._enqueue(enqueue))
        tagged = TypedSearchAttributes([SearchAttributePair(KIND, TASK_KIND)])
        # A job that continues as new must not take its running tasks with it: they are abandoned and
        # report their end by signal (REQUEST_CANCEL would cancel them when the run closes).
        closing = workflow.ParentClosePolicy.ABANDON if self._handover else workflow.ParentClosePolicy.REQUEST_CANCEL
        for start in range(first, end, START_BATCH):
            if self._phase is JobPhase.KILLING:
                break
            batch = range(start, min(start + START_BATCH, end))
            handles = await asyncio.gather(
                *(
                    workflow.start_child_workflow(
                        TASK_WORKFLOW,  # by name, for its result raw: decoded by job_table.read_task_result
                        TaskInput(
                            job_id=job_id,
                            task_index=i,
                            num_tasks=req.replicas,
                            spec=spec,
                            argv=argv,
                            function_blob=req.entrypoint.function_blob,
                            env=dict(req.env),
                            image=req.image,
                            max_retries_failure=0 if gang else req.max_retries_failure,
                            max_retries_preemption=0 if gang else req.max_retries_preemption,
                            submitted_at=req.submitted_at,
                            first_attempt=attempt,
                            gang=gang,
                            bundle_blob=req.bundle_blob,
                            setup=list(req.setup),
                            launch_blob=req.launch_blob,
                            report_end=self._handover,
                            namespace=req.namespace,
                        ),
                        id=task_workflow_id(job_id, i),
                        result_type=RawValue,
                        task_queue=CONTROL_TASK_QUEUE,
                        parent_close_policy=closing,
                        static_summary=f"{req.name or job_id} task {i}/{req.replicas}",
                        search_attributes=tagged,
                    )
                    for i in batch
                )
            )
            self._children.update(zip(batch, handles, strict=True))
            self._next_task = batch.stop
            if not gang:
                self._open.update(batch)
                for i, handle in zip(batch, handles, strict=True):
                    handle.add_done_callback(functools.partial(_note_end, self._ended, i))
        if early is not None:
            await early  # a task killed meanwhile gives its place back when its cancellation ends it
        if self._phase is JobPhase.KILLING:
            self._cancel_running()
            self._kill_unstarted()
            return
        if early is not None:
            return
        await self._enqueue(enqueue)

    def _kill_unstarted(self) -> None:
        self.table.end_rows(range(self._next_task, self.req.replicas), TaskState.KILLED, "killed before it started")
        self._next_task = self.req.replicas

    async def _enqueue(self, enqueue: Enqueue) -> None:
        """Hand the tasks to the scheduler through a local activity, which costs no extra workflow task.

        The scheduler is started by the controller before it serves; should it not
        exist yet, the job tries again each second rather than fail.
        """
        delivery = Delivery(SCHEDULER_WORKFLOW_ID, ENQUEUE, enqueue)
        while await workflow.execute_local_activity(
            DELIVER_SIGNALS, [delivery], result_type=list[int], start_to_close_timeout=timedelta(seconds=30)
        ):
            workflow.logger.warning("scheduler not found; enqueueing %s again in 1 s", enqueue.job_id)
            await workflow.sleep(1)
