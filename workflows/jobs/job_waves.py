"""The job workflow's task children: started in batches, a large plain job's in waves, and enqueued.

A task child stays "pending" for Temporal until it ends, and a workflow may have at most 2,000
pending children: a large plain job keeps open only a little more children than it runs, and
starts the next wave as places free up.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, SearchAttributePair, TypedSearchAttributes

from workflows.jobs.job_table import read_task_result  # the parts hold workflow code: sandboxed

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CONTROL_TASK_QUEUE,
        DELIVER_SIGNALS,
        ENQUEUE,
        RELEASE_BATCH,
        SCHEDULER_WORKFLOW_ID,
        TASK_KIND,
        Delivery,
        Release,
        task_workflow_id,
    )
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import constraint_fields
    from workflows.jobs.job_limits import MAX_PENDING_CHILDREN
    from workflows.messages import (
        ConstraintSpec,
        Enqueue,
        SchedulingSpec,
        TaskInput,
        TaskResult,
    )
    from workflows.states import TaskState
    from workflows.tasks.task_workflow import TASK_WORKFLOW
    from workflows.visibility import KIND

RELEASES_PER_SIGNAL = 1_000  # ~100 bytes each: a signal far below the 2 MB payload limit
START_BATCH = 500  # children started per batch: Temporal allows 2,000 pending per workflow
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
# A plain job that may outgrow one history continues as new on the server's suggestion, its running
# tasks handed over to the next run (job_handover). A job's history takes ~4 events per task and ~2-4
# per retry; Temporal ends a history at 51,200 events.
HANDOVER_ATTEMPTS = 5_000  # a plain job whose budgets allow more attempts than this may hand over


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
    """Done-callback of a plain job's child: queue its index for the job's collect loop."""
    ended.append((index, None))


class TaskChildren:
    """The job's task children: those started, those open (plain jobs), those ended and not yet recorded.

    A large plain job starts its tasks in waves (`next_wave`); a job that may outgrow one history
    starts them abandoned (`handover`), to be handed over to the next run (job_handover).
    """

    def __init__(self) -> None:
        self.handles: dict[int, workflow.ChildWorkflowHandle[Any, Any]] = {}
        self.next_task = 0  # the next task index to start, for jobs started in waves
        # Task indexes whose child ended, in the order Temporal resolved them (or the TASK_ENDED
        # signal brought them, with the result); an index may come twice (child and signal).
        self.ended: deque[tuple[int, TaskResult | None]] = deque()
        self.open: set[int] = set()  # tasks of a plain job started and not yet recorded as ended
        self.handover = False  # this job continues as new with its tasks running (`may_outgrow_history`)

    def adopt(self, handover: pb.JobHandover) -> None:
        """The tasks an earlier run of this job started and left running."""
        self.open = set(handover.open_tasks)
        self.next_task = handover.next_task
        self.handover = True

    def adopted(self) -> list[int]:
        """Open tasks an earlier run started (no handle in this run)."""
        return sorted(self.open.difference(self.handles))

    async def first_wave(self, job_id: str, req: pb.JobRequest, attempt: int, killing: Callable[[], bool]) -> bool:
        """Start the task children (all of them, or a first wave for a large job) and enqueue them;
        False if the job was killed meanwhile (`start`)."""
        self.next_task = 0
        end = req.replicas
        if not req.coschedule_group_by:
            end = min(end, WAVE_FLOOR)
            self.handover = may_outgrow_history(req)
        return await self.start(job_id, req, attempt, end, killing)

    async def next_wave(self, req: pb.JobRequest, running: int, killing: Callable[[], bool]) -> bool:
        """Start more of a large job's tasks once a wave's worth of its pending children has ended."""
        if not self.wave_due(req.replicas, running):
            return True
        end = min(req.replicas, self.next_task + self._open_cap(running) - len(self.open))
        return await self.start(workflow.info().workflow_id, req, 0, end, killing)

    def _open_cap(self, running: int) -> int:
        """How many task children a large plain job keeps open: its running tasks and a margin."""
        return min(MAX_PENDING_CHILDREN, max(WAVE_FLOOR, running + WAVE_AHEAD))

    def wave_due(self, replicas: int, running: int) -> bool:
        """More of the job's tasks may start: a wave's worth of places is free under the cap (which grows
        as more of them run: long tasks end rarely)."""
        return self.next_task < replicas and len(self.open) <= self._open_cap(running) - WAVE_STEP

    async def start(self, job_id: str, req: pb.JobRequest, attempt: int, end: int, killing: Callable[[], bool]) -> bool:
        """Start task children `next_task` .. `end` - 1 in batches, then enqueue them with one signal.

        False, without the enqueue, if the job was killed meanwhile (`killing()`): the caller cancels
        what started and ends the rest.
        """
        spec = scheduling_spec(req)
        gang = bool(req.coschedule_group_by)
        kind = req.entrypoint.WhichOneof("kind")
        argv = list(req.entrypoint.command.argv) if kind == "command" else []
        first = self.next_task
        queued = Enqueue(job_id, spec, dict.fromkeys(range(first, end), attempt), req.submitted_at)
        early: asyncio.Task[None] | None = None
        if first == 0 and not gang and end <= EARLY_ENQUEUE_MAX:
            early = asyncio.create_task(enqueue(queued))
        tagged = TypedSearchAttributes([SearchAttributePair(KIND, TASK_KIND)])
        # A job that continues as new must not take its running tasks with it: they are abandoned and
        # report their end by signal (REQUEST_CANCEL would cancel them when the run closes).
        closing = workflow.ParentClosePolicy.ABANDON if self.handover else workflow.ParentClosePolicy.REQUEST_CANCEL
        for start in range(first, end, START_BATCH):
            if killing():
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
                            report_end=self.handover,
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
            self.handles.update(zip(batch, handles, strict=True))
            self.next_task = batch.stop
            if not gang:
                self.open.update(batch)
                for i, handle in zip(batch, handles, strict=True):
                    handle.add_done_callback(functools.partial(_note_end, self.ended, i))
        if early is not None:
            await early  # a task killed meanwhile gives its place back when its cancellation ends it
        if killing():
            return False
        if early is None:
            await enqueue(queued)
        return True


async def enqueue(queued: Enqueue) -> None:
    """Hand the tasks to the scheduler (`tell_scheduler`: no extra workflow task, and again while it is not there)."""
    await tell_scheduler(ENQUEUE, queued)


async def tell_scheduler(signal: str, arg: object) -> None:
    """Signal the scheduler through a local activity, which costs no extra workflow task.

    The scheduler is started by the controller before it serves; should it not exist yet, the job tries again
    each second rather than fail (an enqueue, and a reserving job's hold and release: job_reservation).
    """
    delivery = Delivery(SCHEDULER_WORKFLOW_ID, signal, arg)
    while await workflow.execute_local_activity(
        DELIVER_SIGNALS, [delivery], result_type=list[int], start_to_close_timeout=timedelta(seconds=30)
    ):
        workflow.logger.warning("scheduler not found; %s sent again in 1 s", signal)
        await workflow.sleep(1)


def ended_child(index: int, handle: workflow.ChildWorkflowHandle[Any, Any], attempt: int,
                unreleased: list[Release]) -> TaskResult:  # fmt: skip
    """An ended child's result, which it hands over raw (`start` starts it so), decoded by the converter's plan.

    A child whose workflow closed without returning (cancelled before it ran, terminated or failed from outside)
    gave back no place: it is added to `unreleased` at `attempt` (its row's in the job's table), for `release_for`.
    """
    if handle.cancelled() or handle.exception() is not None:
        unreleased.append(Release(workflow.info().workflow_id, index, attempt))
    try:
        raw: RawValue = handle.result()
    except BaseException as err:  # the child itself failed or was terminated from outside
        return TaskResult(task_index=index, state=TaskState.KILLED, error=f"task workflow ended: {err}")
    return read_task_result(raw)


async def release_for(releases: list[Release]) -> None:
    """Give back the places of tasks whose workflows closed without returning, through the same local activity as
    `enqueue`: a task cancelled before its first workflow task ran (its job killed as it started) never ran the code
    that releases, and the scheduler may have placed it meanwhile. In batches, as an agent sends its tasks' ends;
    a scheduler not found has nothing to give back."""
    chunks = range(0, len(releases), RELEASES_PER_SIGNAL)
    deliveries = [Delivery(SCHEDULER_WORKFLOW_ID, RELEASE_BATCH, releases[i : i + RELEASES_PER_SIGNAL]) for i in chunks]
    await workflow.execute_local_activity(
        DELIVER_SIGNALS, deliveries, result_type=list[int], start_to_close_timeout=timedelta(seconds=30)
    )
