"""JobWorkflow: expands a job into TaskWorkflow children and derives the job's state.

The job keeps a table of its tasks (updated by the agent's "task_started"
signal, by retries and by each child's result), sends the scheduler one
batched enqueue signal (from a local activity), and kills what is still
running when the job fails, is terminated, or when one task of a coscheduled
job dies.

A plain job that could outgrow one history (more tasks than a wave, or a large
retry budget) continues as new when the server suggests it, with its tasks
still running (job_handover). What the job does meanwhile (fail, break a gang,
be killed) is the table in job_lifecycle.

One concern per module: this one holds the run, the gang's attempts and the
lifecycle; job_table the task table and what it publishes, job_waves the
children and their enqueue, job_handover continue-as-new (mixed in over job_base).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, VersioningBehavior
from temporalio.exceptions import ApplicationError

from workflows import job_reservation
from workflows.job_dependencies import await_dependencies, show_job_control
from workflows.job_handover import Handover, unpack_handover  # the parts hold workflow code: sandboxed
from workflows.job_table import Table, read_task_result
from workflows.job_tree import JobTree, announce_to_parent
from workflows.job_waves import MAX_PENDING_CHILDREN, Waves

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CHILD_STARTED,
        EFFECTIVE_BAND,
        KILL_JOB,
        SCHEDULER_RESTARTED,
        task_workflow_id,
    )
    from activities.proto import cluster_pb2 as pb
    from workflows.job_lifecycle import JobEffect, JobEvent, JobPhase, transition
    from workflows.job_summary import summary_status
    from workflows.messages import (
        GangProgress,
        TaskResult,
    )
    from workflows.states import TERMINAL_TASK_STATES, JobState, TaskState, job_state_from_counts
    from workflows.visibility import (
        MAX_JOB_ERROR_CHARS,
        JobView,
        cap_text,
    )

# A job of more tasks than a wave continues as new (job_handover), so its size is bounded by the store, not
# by one history; what grows with it stays far below the 2 MB payload limit at this size: the handed-over
# table (~0.8 MB compressed at 100,000 rows), and the query answers and result (a summary, job_summary).
MAX_REPLICAS = 100_000
MAX_GANG_REPLICAS = MAX_PENDING_CHILDREN  # a gang is placed as one unit: every member pending at once


@workflow.defn(name="JobWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class JobWorkflow(Table, Waves, Handover):
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
        self._endpoint_rows: set[int] = set()  # rows holding the endpoints of running tasks
        self._reservation_released = False  # set before the job's release goes out: never held again after it
        self.tree = JobTree(has_children=gang.has_children if gang is not None else False)
        if handover:
            self.req = req
            self._take_over(unpack_handover(handover))

    # -- queries and signals -----------------------------------------------------------------


    @workflow.signal(name=KILL_JOB)
    def kill(self, reason: str) -> None:
        """Terminate the job: cancel every task, which stops its process first."""
        if self._phase is not JobPhase.KILLING:
            self._kill_reason = reason or "killed by user"
            self._on(JobEvent.KILL)


    @workflow.signal(name=CHILD_STARTED)
    def child_started(self, child_id: str) -> None:
        """A child job started (job_tree): this job's end kills it if it still runs then."""
        self.tree.child_started(child_id)

    @workflow.signal(name=SCHEDULER_RESTARTED)
    async def scheduler_restarted(self) -> None:
        """A scheduler that started empty (activities.recovery) hears this job's reservation again."""
        if self.req.reservation and not self._reservation_released:
            await job_reservation.hold(workflow.info().workflow_id, self.req)

    @workflow.signal(name=EFFECTIVE_BAND)
    def effective_band(self, band: str) -> None:
        """The band the scheduler schedules this job in (batch while its user has no credits); sent on change."""
        self.status.effective_priority = band

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
                parent_job_id=req.parent_job_id, namespace=req.namespace,
                priority=req.band or "interactive", effective_priority=req.band or "interactive",
            )
            self._published = JobView.from_memo(workflow.memo())  # what the client started it with
            show_job_control(self.status, req, waiting=gang is None)
        problem = self._check(req)
        if problem:
            return self._finish(JobState.FAILED, problem)
        if not handover and gang is None and not await announce_to_parent(req.parent_job_id):
            return self._finish(JobState.KILLED, f"killed: its parent job {req.parent_job_id} had already ended")
        if not handover:
            for i in range(req.replicas):
                self.status.tasks.add(task_index=i, task_id=task_workflow_id(job_id, i), state=TaskState.PENDING)
            self._counts = {TaskState.PENDING: req.replicas}
        if req.after and not handover and gang is None:  # wait for the jobs it runs after (job_dependencies)
            self._refresh_state()
            ended = await self._wait_for_dependencies(req)
            if ended is not None:
                return self._finish(*ended)
        if req.reservation and not handover and gang is None:
            await job_reservation.hold(job_id, req)
        if gang is not None:
            self.status.preemptions = gang.preemptions
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
        await self.tree.sweep(state)  # its unfinished descendants die with it (job_tree)
        if req.reservation:
            self._reservation_released = True
            await job_reservation.release(job_id)
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
            self.status.preemptions = progress.preemptions  # the gang's, not one per member
            for row in self.status.tasks:
                row.failure_count, row.preemption_count = progress.failures, progress.preemptions
            if progress.failures > req.max_retries_failure or progress.preemptions > req.max_retries_preemption:
                return
            progress.attempt += 1
            workflow.logger.info("gang of %s retried as a unit (attempt %d): %s", job_id, progress.attempt, cause.error)
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                progress.has_children = self.tree.has_children
                workflow.continue_as_new(args=[req, progress, b""])  # every argument, or none is typed
            self._on(JobEvent.GANG_RETRY, attempt=progress.attempt)

    async def _wait_for_dependencies(self, req: pb.JobRequest) -> tuple[JobState, str] | None:
        """Wait for the jobs of `after=` (job_dependencies); how the job ends if it never starts."""
        outcome = await await_dependencies(
            req, self.status, killing=lambda: self._kill_reason if self._phase is JobPhase.KILLING else None,
            on_cancel=lambda: self.kill("job workflow cancelled"), changed=self._publish,
        )  # fmt: skip
        if outcome is not None:
            task_state = TaskState.KILLED if outcome[0] is JobState.KILLED else TaskState.UNSCHEDULABLE
            for row in self.status.tasks:
                self._set_row(row, task_state)
                row.error = "never started: " + outcome[1]
        return outcome

    def _check(self, req: pb.JobRequest) -> str:
        """The client validates first; this only keeps a hand-made request from wedging the job."""
        cap = MAX_GANG_REPLICAS if req.coschedule_group_by else MAX_REPLICAS
        if not 1 <= req.replicas <= cap:
            return f"replicas must be between 1 and {cap}, got {req.replicas}"
        if req.coschedule_num_groups > 1 and req.replicas % req.coschedule_num_groups:
            return f"replicas ({req.replicas}) must split evenly over {req.coschedule_num_groups} slices"
        if req.entrypoint.WhichOneof("kind") is None:
            return "entrypoint: neither a function nor a command was given"
        return ""


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


    def _cancel_running(self) -> None:
        for handle in self._children.values():
            if not handle.done():
                handle.cancel()
        adopted = sorted(self._open.difference(self._children))  # started by an earlier run of this job
        if adopted:
            asyncio.get_running_loop().create_task(self._cancel_adopted(adopted))


    def _finish(self, state: JobState, error: str) -> pb.JobStatus:
        """Record the final state; a job that did not succeed also fails its workflow.

        Failing the workflow makes the Temporal UI's status and "Failures" view
        agree with the job (the JobStatus rides along as the failure's details).
        """
        self.status.error = cap_text(error, MAX_JOB_ERROR_CHARS) if state != JobState.SUCCEEDED else ""
        self.status.finished_at = workflow.now().timestamp()
        self._set_state(state)
        self._flush()
        result = summary_status(self.status)  # a 10,000-task table whole would pass the 2 MB payload limit
        if state != JobState.SUCCEEDED:
            raise ApplicationError(
                f"job {state}: {self.status.error}", result, type=f"Job{state.title()}", non_retryable=True
            )
        return result




def _child_result(index: int, handle: workflow.ChildWorkflowHandle[Any, Any]) -> TaskResult:
    """The child's result, which it hands over raw (job_waves starts it so): decoded by the converter's plan."""
    try:
        raw: RawValue = handle.result()
    except BaseException as err:  # the child itself failed or was terminated from outside
        return TaskResult(task_index=index, state=TaskState.KILLED, error=f"task workflow ended: {err}")
    return read_task_result(raw)
