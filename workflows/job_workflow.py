"""JobWorkflow: expands a job into TaskWorkflow children and derives the job's state.

The job keeps a table of its tasks (updated by the agent's "task_started"
signal, by retries and by each child's result), sends the scheduler one
batched enqueue signal (from a local activity), and kills what is still
running when the job fails, is terminated, or when one task of a coscheduled
job dies.

A plain job that could outgrow one history (more tasks than a wave, or a large
retry budget) continues as new when the server suggests it, with its tasks
still running: they are started with ParentClosePolicy.ABANDON and send their
result to the job's workflow id (TASK_ENDED), which reaches whichever run is
current; the next run takes over the table, the open tasks and the waves
(`pb.JobHandover`), and cancels open tasks by their workflow ids. This is
Temporal's sliding-window pattern for batches larger than one history.
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from collections import deque
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, VersioningBehavior
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import DELIVER_SIGNALS, FIND_LOST_TASKS, TASK_ENDED, Delivery, LostTask, TaskStarted
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import get_attr
    from workflows.details import job_status_markdown
    from workflows.ids import (
        CONTROL_TASK_QUEUE,
        JOB_NAME_ATTRIBUTE,
        JOB_STATE_ATTRIBUTE,
        JOB_TASKS_ATTRIBUTE,
        JOB_USER_ATTRIBUTE,
        KIND_ATTRIBUTE,
        SCHEDULER_WORKFLOW_ID,
        TASK_KIND,
        task_workflow_id,
    )
    from workflows.job_lifecycle import JobEffect, JobEvent, JobPhase, transition
    from workflows.messages import (
        ConstraintSpec,
        Enqueue,
        GangProgress,
        SchedulingSpec,
        TaskInput,
        TaskResult,
        TaskRetrying,
    )
    from workflows.states import TERMINAL_TASK_STATES, JobState, TaskState, job_state_from_counts
    from workflows.task_workflow import TaskWorkflow
    from workflows.visibility import (
        MAX_ERROR_CHARS,
        MAX_JOB_ERROR_CHARS,
        MAX_REASON_CHARS,
        JobView,
        cap_text,
        compact_status,
    )

JOB_STATE = SearchAttributeKey.for_keyword(JOB_STATE_ATTRIBUTE)
JOB_NAME = SearchAttributeKey.for_keyword(JOB_NAME_ATTRIBUTE)
JOB_USER = SearchAttributeKey.for_keyword(JOB_USER_ATTRIBUTE)
JOB_TASKS = SearchAttributeKey.for_int(JOB_TASKS_ATTRIBUTE)
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)
START_BATCH = 500  # children started per batch: Temporal allows 2,000 pending per workflow
# A task child stays "pending" for Temporal until it ends, and a workflow may have at most 2,000
# pending children: a larger job starts its tasks in waves, at most MAX_PENDING_CHILDREN at once.
MAX_PENDING_CHILDREN = 1_000
# A job's history takes ~4.7 events per task (measured at 1,200 tasks) and Temporal ends a history at
# 51,200 events; its result table is ~1 MB at 10,000 compact rows (payload limit 2 MB).
MAX_REPLICAS = 10_000
MAX_GANG_REPLICAS = MAX_PENDING_CHILDREN  # a gang is placed as one unit: every member pending at once
# A large plain job keeps open only a little more task children than it runs. Every open child
# costs on each of the job's events: a 10,000-task job of `true` on 320 slots ran at 11.5 tasks/s
# with 1,000 open and at 22.3 tasks/s with 400. Open children include the running ones, so the cap
# still grows to MAX_PENDING_CHILDREN on a fleet that runs that many.
WAVE_FLOOR = 400  # open children of a large job while few of its tasks run
WAVE_AHEAD = 200  # open children beyond the job's running tasks (queued, placed, starting)
WAVE_STEP = 200  # the next wave starts once this many places are free under the cap
# A plain job that may outgrow one history continues as new on the server's suggestion, its running
# tasks handed over to the next run (see the module docstring). A job's history takes ~4 events per
# task and ~2-4 per retry; Temporal ends a history at 51,200 events.
HANDOVER_ATTEMPTS = 5_000  # a plain job whose budgets allow more attempts than this may hand over
# A run that adopted tasks checks for adopted tasks whose workflow closed without reporting
# (terminated or failed from outside), which would hang the job: first after LOST_TASK_CHECK, then
# twice as long each time up to LOST_TASK_CHECK_MAX (a long-running job pays ~11 events per check).
LOST_TASK_CHECK = timedelta(seconds=10)
LOST_TASK_CHECK_MAX = timedelta(minutes=10)
# A small job enqueues its tasks in the workflow task that starts them, not in the next one, which
# takes ~20-30 ms off submit-to-running; the assignment can then reach a task before it exists, and
# the scheduler's delivery waits for it (activities/signals.py). Hundreds of children take seconds
# to start on a loaded server, so only a small first batch goes this way.
EARLY_ENQUEUE_MAX = 32  # tasks


def may_outgrow_history(req: pb.JobRequest) -> bool:
    """Whether a plain job can take more events than one history holds (decided once, from its request).

    Every attempt the budgets allow counts, preemptions too: 5,000 attempts at ~4-8 events each stay
    inside one history. Small jobs with small budgets keep the cheaper shape: no marker, no extra
    signal per task.
    """
    attempts = req.replicas * (1 + req.max_retries_failure + req.max_retries_preemption)
    return req.replicas > WAVE_FLOOR or attempts > HANDOVER_ATTEMPTS


def scheduling_spec(req: pb.JobRequest) -> SchedulingSpec:
    constraints = []
    for c in req.constraints:
        constraints.append(ConstraintSpec(c.key, c.op, get_attr(c.value) if c.HasField("value") else None))
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
    )


@workflow.defn(name="JobWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class JobWorkflow:
    @workflow.init
    def __init__(
        self, req: pb.JobRequest, gang: GangProgress | None = None, handover: bytes = b""
    ) -> None:
        """Takes a handed-over table before any handler runs: signals buffered across continue-as-new
        (a task's end, a task's start) are delivered before the run method begins."""
        self.status = pb.JobStatus()
        self.req = pb.JobRequest()
        self._children: dict[int, workflow.ChildWorkflowHandle[Any, Any]] = {}
        self._phase = JobPhase.ACTIVE  # what the job does while its tasks run (job_lifecycle)
        self._kill_reason = ""
        self._gang_break: TaskResult | None = None  # the result that broke this gang attempt (KEEP_CAUSE)
        self._published = JobView()
        self._next_task = 0  # the next task index to start, for jobs started in waves
        self._stale = False  # the memo lags the status (see _publish)
        self._counts: dict[str, int] = {}  # tasks per state, kept by _set_row: no scan of the table per change
        # Task indexes whose child ended, in the order Temporal resolved them (or the TASK_ENDED
        # signal brought them, with the result); an index may come twice (child and signal).
        self._ended: deque[tuple[int, TaskResult | None]] = deque()
        self._open: set[int] = set()  # tasks of a plain job started and not yet recorded as ended
        self._handover = False  # this job continues as new with its tasks running (`may_outgrow_history`)
        if handover:
            self.req = req
            self._take_over(unpack_handover(handover))

    # -- queries and signals -----------------------------------------------------------------

    @workflow.query
    def job_status(self) -> pb.JobStatus:
        return compact_status(self.status)

    @workflow.signal
    def kill(self, reason: str) -> None:
        """Terminate the job: cancel every task, which stops its process first."""
        if self._phase is not JobPhase.KILLING:
            self._kill_reason = reason or "killed by user"
            self._on(JobEvent.KILL)

    @workflow.signal
    def task_started(self, msg: TaskStarted) -> None:
        if not 0 <= msg.task_index < len(self.status.tasks):
            return
        row = self.status.tasks[msg.task_index]
        if row.state in TERMINAL_TASK_STATES or msg.attempt < row.attempt:
            return
        self._set_row(row, TaskState.RUNNING)
        row.attempt, row.worker_id = msg.attempt, msg.worker_id
        self._refresh_state()

    @workflow.signal
    def pending_reason(self, reason: str) -> None:
        """Why the scheduler cannot place this job's pending tasks yet ("" once it can); sent on change."""
        self.status.pending_reason = cap_text(reason, MAX_REASON_CHARS)
        self._publish()

    @workflow.signal(name=TASK_ENDED)
    def task_ended(self, result: TaskResult) -> None:
        """A task of a job that continues as new ended; it reaches this run even if an earlier one started it."""
        if 0 <= result.task_index < len(self.status.tasks):
            self._ended.append((result.task_index, result))

    @workflow.signal
    def task_retrying(self, msg: TaskRetrying) -> None:
        if not 0 <= msg.task_index < len(self.status.tasks):
            return
        row = self.status.tasks[msg.task_index]
        if row.state in TERMINAL_TASK_STATES:
            return
        self._set_row(row, TaskState.PENDING)
        row.attempt, row.error = msg.attempt, cap_text(msg.error, MAX_ERROR_CHARS)
        row.failure_count, row.preemption_count = msg.failure_count, msg.preemption_count
        self._refresh_state()

    # -- the run -----------------------------------------------------------------------------

    @workflow.run
    async def run(
        self, req: pb.JobRequest, gang: GangProgress | None = None, handover: bytes = b""
    ) -> pb.JobStatus:
        """Run the job; continue-as-new hands over `gang` between attempts of a gang, and `handover`
        (the table and the tasks still running, see `pack_handover`) for a plain job."""
        self.req = req
        job_id = workflow.info().workflow_id
        asyncio.create_task(self._publisher())  # noqa: RUF006 - lives as long as the run
        if handover:
            asyncio.create_task(self._watch_adopted())  # noqa: RUF006 - lives as long as the run
        if not handover:
            self.status = pb.JobStatus(
                job_id=job_id, name=req.name, user=req.user, state=JobState.PENDING,
                num_tasks=req.replicas, submitted_at=req.submitted_at,
            )
            self._published = JobView.from_memo(workflow.memo())  # what the client started it with
        problem = self._check(req)
        if problem:
            return self._finish(JobState.FAILED, problem)
        if not handover:
            for i in range(req.replicas):
                self.status.tasks.add(task_index=i, task_id=task_workflow_id(job_id, i), state=TaskState.PENDING)
            self._counts = {TaskState.PENDING: req.replicas}
        if gang is not None:
            for row in self.status.tasks:
                row.attempt, row.failure_count, row.preemption_count = gang.attempt, gang.failures, gang.preemptions
        self._refresh_state()
        try:
            if req.coschedule_group_by:
                await self._run_gang(job_id, req, gang or GangProgress())
            else:
                if not handover:
                    await self._start_tasks(job_id, req, attempt=0)
                await self._collect_plain()
        except asyncio.CancelledError:
            # Cancelled from outside (e.g. the Temporal UI): same as `iris job kill`.
            self.kill("job workflow cancelled")
            await (self._collect() if req.coschedule_group_by else self._collect_plain())
        state = job_state_from_counts(
            self._counts,
            req.replicas,
            failed_tasks=self._failed_tasks(),
            max_task_failures=0 if req.coschedule_group_by else req.max_task_failures,
            killed=self._phase is JobPhase.KILLING,
        )
        return self._finish(state, self._kill_reason if self._kill_reason else self.status.error)

    async def _run_gang(self, job_id: str, req: pb.JobRequest, progress: GangProgress) -> None:
        """Run a coscheduled job: the gang is placed, killed and retried as one unit.

        When any member fails or loses its worker, its siblings are killed and,
        within the job's retry budgets, the whole gang goes back to the queue
        together, so it lands again on one healthy group. Between attempts no
        task runs, so that is where a long-retrying gang continues-as-new.
        """
        while True:
            self._gang_break = None
            await self._start_tasks(job_id, req, attempt=progress.attempt)
            await self._collect()
            cause = self._gang_break
            if self._phase is not JobPhase.GANG_BROKEN or cause is None:
                return  # it ended, failed (a member was unschedulable) or was killed
            # PENDING is a dispatch failure, not the gang's fault: it is placed again without spending a budget.
            progress.failures += int(cause.state == TaskState.FAILED)
            progress.preemptions += int(cause.state == TaskState.WORKER_FAILED)
            for row in self.status.tasks:
                row.failure_count, row.preemption_count = progress.failures, progress.preemptions
            if progress.failures > req.max_retries_failure or progress.preemptions > req.max_retries_preemption:
                return
            progress.attempt += 1
            workflow.logger.info("gang of %s retried as a unit (attempt %d): %s", job_id, progress.attempt, cause.error)
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(args=[req, progress, b""])  # every argument, or none is typed
            self._on(JobEvent.GANG_RETRY, attempt=progress.attempt)

    def _check(self, req: pb.JobRequest) -> str:
        """The client validates first; this only keeps a hand-made request from wedging the job."""
        cap = MAX_GANG_REPLICAS if req.coschedule_group_by else MAX_REPLICAS
        if not 1 <= req.replicas <= cap:
            return f"replicas must be between 1 and {cap}, got {req.replicas}"
        if req.entrypoint.WhichOneof("kind") is None:
            return "entrypoint: neither a function nor a command was given"
        return ""

    async def _start_tasks(self, job_id: str, req: pb.JobRequest, attempt: int) -> None:
        """Start the task children (all of them, or a first wave for a large job) and enqueue them."""
        self._next_task = 0
        end = req.replicas
        if not req.coschedule_group_by:
            end = min(end, WAVE_FLOOR)
            self._handover = may_outgrow_history(req)
        await self._start_range(job_id, req, attempt, end)

    def _take_over(self, handover: pb.JobHandover) -> None:
        """Begin where the previous run of this plain job left off (it continued as new)."""
        self.status.CopyFrom(handover.status)
        self._counts = {}
        for row in self.status.tasks:
            self._counts[row.state] = self._counts.get(row.state, 0) + 1
        self._open = set(handover.open_tasks)
        self._next_task = handover.next_task
        self._handover = True
        self._published = self._view()  # the memo and search attributes came along with continue-as-new

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
        running = self._counts.get(TaskState.RUNNING, 0)
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
                        TaskWorkflow.run,
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
                        ),
                        id=task_workflow_id(job_id, i),
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
        for i in range(self._next_task, self.req.replicas):
            row = self.status.tasks[i]
            self._set_row(row, TaskState.KILLED)
            row.error = "killed before it started"
        self._next_task = self.req.replicas

    async def _enqueue(self, enqueue: Enqueue) -> None:
        """Hand the tasks to the scheduler through a local activity, which costs no extra workflow task.

        The scheduler is started by the controller before it serves; should it not
        exist yet, the job tries again each second rather than fail.
        """
        delivery = Delivery(SCHEDULER_WORKFLOW_ID, "enqueue", enqueue)
        while await workflow.execute_local_activity(
            DELIVER_SIGNALS, [delivery], result_type=list[int], start_to_close_timeout=timedelta(seconds=30)
        ):
            workflow.logger.warning("scheduler not found; enqueueing %s again in 1 s", enqueue.job_id)
            await workflow.sleep(1)

    async def _collect_plain(self) -> None:
        """Wait for every child of a plain job, starting the next waves as earlier tasks end.

        Each child's end is queued by a done-callback, so recording it costs the
        same at 10 or 10,000 pending children (waiting on all of them at once is
        a scan per ended child).
        """
        while True:
            self._record_ended()
            if self._next_task < self.req.replicas:
                await self._start_next_wave()
            if not self._open and not self._ended:
                break
            if self._handover_due():
                await self._continue_as_new()
            await workflow.wait_condition(lambda: bool(self._ended) or self._wave_due() or self._handover_due())
        if self._next_task < self.req.replicas:
            self._kill_unstarted()  # the job failed or was killed before its last waves started

    def _record_ended(self) -> None:
        while self._ended:
            index, result = self._ended.popleft()
            if index not in self._open:
                continue  # recorded already: its child's end and its TASK_ENDED signal both came
            self._open.discard(index)
            self._record(index, result if result is not None else _child_result(index, self._children[index]))

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
                row = self.status.tasks[task.index]
                error = f"task workflow {task.status.lower()} without reporting its end"
                self._ended.append((task.index, TaskResult(
                    task_index=task.index, state=TaskState.KILLED, worker_id=row.worker_id, attempt=row.attempt,
                    failure_count=row.failure_count, preemption_count=row.preemption_count, error=error,
                )))  # fmt: skip
                if not self.status.error:
                    self.status.error = cap_text(f"task {task.index} killed: {error}", MAX_JOB_ERROR_CHARS)

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
            status=compact_status(self.status), open_tasks=sorted(self._open),
            next_task=self._next_task,
        )  # fmt: skip
        self._flush()
        workflow.logger.info("job %s continues as new with %d tasks open", self.status.job_id, len(self._open))
        workflow.continue_as_new(args=[self.req, None, pack_handover(handover)])

    async def _collect(self) -> None:
        """Wait for every member of a gang, reacting to each result as it arrives."""
        waiting = {h: i for i, h in self._children.items() if not h.done()}
        for i, h in self._children.items():
            if h.done() and self.status.tasks[i].state not in TERMINAL_TASK_STATES:
                waiting[h] = i
        while waiting:
            done, _ = await workflow.wait(list(waiting), return_when=asyncio.FIRST_COMPLETED)
            for handle in done:
                index = waiting.pop(handle)
                self._record(index, _child_result(index, handle))

    def _record(self, index: int, result: TaskResult) -> None:
        row = self.status.tasks[index]
        self._set_row(row, TaskState(result.state))
        row.worker_id, row.attempt = result.worker_id, result.attempt
        if not self.req.coschedule_group_by:  # a gang's budgets are counted by the job (_run_gang)
            row.failure_count, row.preemption_count = result.failure_count, result.preemption_count
        row.error, row.result_blob = cap_text(result.error, MAX_ERROR_CHARS), result.result_blob
        row.has_exit_code = result.exit_code is not None
        row.exit_code = result.exit_code or 0
        state = TaskState(result.state)
        if state in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.UNSCHEDULABLE) and not self.status.error:
            self.status.error = cap_text(f"task {index} {state.lower()}: {result.error}", MAX_JOB_ERROR_CHARS)
        gang_broken = bool(self.req.coschedule_group_by) and (
            state in (TaskState.FAILED, TaskState.WORKER_FAILED) or result.dispatch_failed
        )
        if gang_broken:
            self._on(JobEvent.GANG_BROKE, cause=result)
        elif state == TaskState.UNSCHEDULABLE or self._failed_tasks() > self.req.max_task_failures:
            self._on(JobEvent.FAIL)
        self._refresh_state()

    def _on(self, event: JobEvent, *, cause: TaskResult | None = None, attempt: int = 0) -> None:
        """Take `event` through the job's lifecycle table (InvalidTransition, failing the workflow task,
        if it cannot happen now) and perform the effects it lists."""
        step = transition(self._phase, event)
        self._phase = step.next
        for effect in step.effects:
            if effect is JobEffect.KEEP_CAUSE:
                self._gang_break = cause
            elif effect is JobEffect.CANCEL_RUNNING:
                self._cancel_running()
            elif effect is JobEffect.RESET_TASKS:
                self._children.clear()
                for row in self.status.tasks:
                    self._set_row(row, TaskState.PENDING)
                    row.attempt, row.worker_id = attempt, ""
                    row.has_exit_code, row.exit_code = False, 0
                self.status.error = ""
                self._refresh_state()

    def _failed_tasks(self) -> int:
        return self._counts.get(TaskState.FAILED, 0) + self._counts.get(TaskState.WORKER_FAILED, 0)

    def _set_row(self, row: pb.TaskStatus, state: TaskState) -> None:
        """Move one task row to `state`, keeping the per-state counts in step."""
        if row.state == state:
            return
        left = self._counts.get(row.state, 0) - 1
        if left > 0:
            self._counts[row.state] = left
        else:
            self._counts.pop(row.state, None)
        self._counts[state] = self._counts.get(state, 0) + 1
        row.state = state

    def _cancel_running(self) -> None:
        for handle in self._children.values():
            if not handle.done():
                handle.cancel()
        adopted = sorted(self._open.difference(self._children))  # started by an earlier run of this job
        if adopted:
            asyncio.get_running_loop().create_task(self._cancel_adopted(adopted))

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

    def _refresh_state(self) -> None:
        self.status.task_state_counts.clear()
        self.status.task_state_counts.update(self._counts)
        self._publish()
        if self._phase is not JobPhase.ACTIVE:
            return  # the final state is decided once every task has stopped
        state = job_state_from_counts(
            self._counts,
            len(self.status.tasks),
            failed_tasks=self._failed_tasks(),
            max_task_failures=self.req.max_task_failures,
            killed=False,
        )
        self._set_state(state)

    def _view(self) -> JobView:
        st = self.status
        return JobView(
            state=st.state, counts=dict(st.task_state_counts), error=st.error,
            pending_reason=st.pending_reason if st.state == JobState.PENDING or st.task_state_counts.get(
                TaskState.PENDING) else "",
            num_tasks=st.num_tasks, submitted_at=st.submitted_at, finished_at=st.finished_at,
        )  # fmt: skip

    def _publish(self) -> None:
        """Mark the memo stale; `_publisher` upserts it once per workflow task, however many changes it saw."""
        self._stale = True

    async def _publisher(self) -> None:
        self._stale = True
        while True:
            await workflow.wait_condition(lambda: self._stale)
            self._flush()

    def _flush(self) -> None:
        self._stale = False
        view = self._view()
        if view != self._published:
            self._published = view
            workflow.upsert_memo(view.to_memo())

    def _set_state(self, state: JobState) -> None:
        if self.status.state != state:
            self.status.state = state
            workflow.upsert_search_attributes([JOB_STATE.value_set(str(state))])
            workflow.set_current_details(job_status_markdown(self.status))  # UI metadata, not history

    def _finish(self, state: JobState, error: str) -> pb.JobStatus:
        """Record the final state; a job that did not succeed also fails its workflow.

        Failing the workflow makes the Temporal UI's status and "Failures" view
        agree with the job (the JobStatus rides along as the failure's details).
        """
        self.status.error = cap_text(error, MAX_JOB_ERROR_CHARS) if state != JobState.SUCCEEDED else ""
        self.status.finished_at = workflow.now().timestamp()
        self._set_state(state)
        self._flush()
        result = compact_status(self.status)  # a 10,000-task table whole would pass the 2 MB payload limit
        if state != JobState.SUCCEEDED:
            raise ApplicationError(
                f"job {state}: {self.status.error}", result, type=f"Job{state.title()}", non_retryable=True
            )
        return result


def pack_handover(handover: pb.JobHandover) -> bytes:
    """Binary protobuf, compressed: a 10,000-row table is ~2 MB as Temporal's default JSON
    (its payload limit) and ~100 KB this way, in ~15 ms."""
    return zlib.compress(handover.SerializeToString(), 1)


def unpack_handover(data: bytes) -> pb.JobHandover:
    return pb.JobHandover.FromString(zlib.decompress(data))


def _note_end(ended: deque[tuple[int, TaskResult | None]], index: int, _handle: object) -> None:
    """Done-callback of a plain job's child: queue its index for `_collect_plain`."""
    ended.append((index, None))


def _child_result(index: int, handle: workflow.ChildWorkflowHandle[Any, Any]) -> TaskResult:
    try:
        result: TaskResult = handle.result()
    except BaseException as err:  # the child itself failed or was terminated from outside
        return TaskResult(task_index=index, state=TaskState.KILLED, error=f"task workflow ended: {err}")
    return result
