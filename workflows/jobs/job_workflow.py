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

A thin shell over plain objects, one concern per module: it holds the run, the gang's attempts,
the lifecycle and every handler; `TaskTable` and `JobMemo` (job_table) the rows and what they
publish, `TaskChildren` (job_waves) the task children, `JobTree` (job_tree) its child jobs;
job_handover, job_dependencies and job_reservation are steps it takes around its tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, VersioningBehavior
from temporalio.exceptions import ApplicationError

from workflows.jobs import job_reservation
from workflows.jobs.job_dependencies import await_dependencies, cancelled_reason, show_job_control
from workflows.jobs.job_handover import cancel_adopted, hand_over, handover_due, unpack_handover, watch_adopted
from workflows.jobs.job_table import JobMemo, TaskTable, read_task_result, read_task_started
from workflows.jobs.job_tree import JobTree, announce_to_parent
from workflows.jobs.job_waves import TaskChildren, ended_child, release_for  # the parts hold workflow code: sandboxed

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CHILD_STARTED,
        EFFECTIVE_BAND,
        JOB_STATUS_QUERY,
        JOB_TASKS_QUERY,
        KILL_JOB,
        PENDING_REASON,
        SCHEDULER_RESTARTED,
        TASK_ENDED,
        TASK_RETRYING,
        TASK_STARTED,
        Release,
    )
    from activities.proto import cluster_pb2 as pb
    from workflows.jobs.job_lifecycle import JobEffect, JobEvent, JobPhase, transition
    from workflows.jobs.job_limits import MAX_GANG_REPLICAS as MAX_GANG_REPLICAS
    from workflows.jobs.job_limits import MAX_REPLICAS as MAX_REPLICAS
    from workflows.jobs.job_summary import summary_status, task_page
    from workflows.messages import GangProgress, TaskResult, TaskRetrying
    from workflows.states import TERMINAL_TASK_STATES, JobState, TaskState
    from workflows.visibility import MAX_JOB_ERROR_CHARS, MAX_REASON_CHARS, JobView, cap_text


@workflow.defn(name="JobWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class JobWorkflow:
    @workflow.init
    def __init__(
        self, req: pb.JobRequest, gang: GangProgress | None = None, handover: bytes = b""
    ) -> None:
        """Takes a handed-over table before any handler runs: signals buffered across continue-as-new
        (a task's end, a task's start) are delivered before the run method begins."""
        self.table = TaskTable()
        self.memo = JobMemo(self.table)
        self.req = pb.JobRequest()
        self.children = TaskChildren()
        self._phase = JobPhase.ACTIVE  # what the job does while its tasks run (job_lifecycle)
        self._kill_reason = ""
        self._gang_break: TaskResult | None = None  # the result that broke this gang attempt (KEEP_CAUSE)
        self._reservation_released = False  # set before the job's release goes out: never held again after it
        self.tree = JobTree(has_children=gang.has_children if gang is not None else False)
        if handover:  # begin where the previous run of this plain job left off (job_handover)
            self.req = req
            taken = unpack_handover(handover)
            self.table.take_over(taken.status)
            self.children.adopt(taken)
            self.tree.has_children = taken.has_children
            self.memo.published = self.table.view()  # the memo and search attributes came along with continue-as-new

    # -- queries and signals -----------------------------------------------------------------

    @workflow.query(name=JOB_STATUS_QUERY)
    def job_status(self) -> pb.JobStatus:
        """The job, with its rows past MAX_TABLE_ROWS tasks left to `job_tasks` (a summary: job_summary)."""
        return summary_status(self.table.status)

    @workflow.query(name=JOB_TASKS_QUERY)
    def job_tasks(self, start: int, stop: int) -> bytes:
        """Task rows `start` to `stop` (at most MAX_PAGE_ROWS), compressed: how a client reads a big job's table."""
        return task_page(self.table.status, start, stop)

    @workflow.signal(name=TASK_STARTED)
    def task_started(self, raw: RawValue) -> None:
        """The agent started a task's process (one signal per attempt: taken raw and decoded, as results are)."""
        if self.table.started(read_task_started(raw)):
            self._refresh_state()

    @workflow.signal(name=TASK_RETRYING)
    def task_retrying(self, msg: TaskRetrying) -> None:
        if self.table.retrying(msg):
            self._refresh_state()

    @workflow.signal(name=TASK_ENDED)
    def task_ended(self, raw: RawValue) -> None:
        """A task of a job that continues as new ended; it reaches this run even if an earlier one started it."""
        result = read_task_result(raw)
        if 0 <= result.task_index < len(self.table.status.tasks):
            self.children.ended.append((result.task_index, result))

    @workflow.signal(name=PENDING_REASON)
    def pending_reason(self, reason: str) -> None:
        """Why the scheduler cannot place this job's pending tasks yet ("" once it can); sent on change."""
        self.table.status.pending_reason = cap_text(reason, MAX_REASON_CHARS)
        self.memo.publish()

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
        self.table.status.effective_priority = band

    # -- the run -----------------------------------------------------------------------------

    @workflow.run
    async def run(
        self, req: pb.JobRequest, gang: GangProgress | None = None, handover: bytes = b""
    ) -> pb.JobStatus:
        """Run the job; continue-as-new hands over `gang` between attempts of a gang, and `handover`
        (the table and the tasks still running, see `pack_handover`) for a plain job."""
        self.req = req
        job_id = workflow.info().workflow_id
        asyncio.create_task(self.memo.run())  # noqa: RUF006 - lives as long as the run
        if handover:
            asyncio.create_task(watch_adopted(self.children, self.table))  # noqa: RUF006 - lives as long as the run
        if not handover:
            self.table.status = pb.JobStatus(
                job_id=job_id, name=req.name, user=req.user, state=JobState.PENDING,
                num_tasks=req.replicas, submitted_at=req.submitted_at,
                parent_job_id=req.parent_job_id, namespace=req.namespace,
                priority=req.band or "interactive", effective_priority=req.band or "interactive",
            )
            self.memo.published = JobView.from_memo(workflow.memo())  # what the client started it with
            show_job_control(self.table.status, req, waiting=gang is None)
        problem = self._check(req)
        if problem:
            return self._finish(JobState.FAILED, problem)
        if not handover and gang is None and not await announce_to_parent(req.parent_job_id):
            return self._finish(JobState.KILLED, f"killed: its parent job {req.parent_job_id} had already ended")
        if not handover:
            self.table.add_rows(job_id, req.replicas)
        if req.after and not handover and gang is None:  # wait for the jobs it runs after (job_dependencies)
            self._refresh_state()
            ended = await self._wait_for_dependencies(req)
            if ended is not None:
                return self._finish(*ended)
        if req.reservation and not handover and gang is None:
            await job_reservation.hold(job_id, req)
        if gang is not None:
            self.table.status.preemptions = gang.preemptions
            for row in self.table.status.tasks:
                row.attempt, row.failure_count, row.preemption_count = gang.attempt, gang.failures, gang.preemptions
        self._refresh_state()
        try:
            if req.coschedule_group_by:
                await self._run_gang(job_id, req, gang or GangProgress())
            else:
                if not handover:
                    await self._started(self.children.first_wave(job_id, req, 0, self._killing))
                await self._collect_plain()
        except asyncio.CancelledError:
            # Cancelled from outside (e.g. the Temporal UI): same as `iris job kill`.
            self.kill(cancelled_reason())
            await (self._collect() if req.coschedule_group_by else self._collect_plain())
        state = self.table.state(
            0 if req.coschedule_group_by else req.max_task_failures, killed=self._phase is JobPhase.KILLING
        )
        await self.tree.sweep(state)  # its unfinished descendants die with it (job_tree)
        if req.reservation:
            self._reservation_released = True
            await job_reservation.release(job_id)
        return self._finish(state, self._kill_reason if self._kill_reason else self.table.status.error)

    async def _run_gang(self, job_id: str, req: pb.JobRequest, progress: GangProgress) -> None:
        """Run a coscheduled job: the gang is placed, killed and retried as one unit.

        When any member fails or loses its worker, its siblings are killed and,
        within the job's retry budgets, the whole gang goes back to the queue
        together, so it lands again on one healthy group. Between attempts no
        task runs, so that is where a long-retrying gang continues-as-new.
        """
        while True:
            self._gang_break = None
            await self._started(self.children.first_wave(job_id, req, progress.attempt, self._killing))
            await self._collect()
            cause = self._gang_break
            if self._phase is not JobPhase.GANG_BROKEN or cause is None:
                return  # it ended, failed (a member was unschedulable) or was killed
            # PENDING is a dispatch failure, not the gang's fault: it is placed again without spending a budget.
            progress.failures += int(cause.state == TaskState.FAILED)
            progress.preemptions += int(cause.state == TaskState.WORKER_FAILED)
            self.table.status.preemptions = progress.preemptions  # the gang's, not one per member
            for row in self.table.status.tasks:
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
            req, self.table.status, killing=lambda: self._kill_reason if self._phase is JobPhase.KILLING else None,
            on_cancel=lambda: self.kill(cancelled_reason()), changed=self.memo.publish,
        )  # fmt: skip
        if outcome is not None:
            task_state = TaskState.KILLED if outcome[0] is JobState.KILLED else TaskState.UNSCHEDULABLE
            self.table.end_rows(range(len(self.table.status.tasks)), task_state, "never started: " + outcome[1])
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
        children = self.children
        while True:
            await self._record_ended()
            if children.next_task < self.req.replicas and self._phase is JobPhase.ACTIVE:
                await self._started(children.next_wave(self.req, self._running(), self._killing))
            if not children.open and not children.ended:
                break
            if self._handover_due():
                await self._continue_as_new()
            await workflow.wait_condition(lambda: bool(children.ended) or self._wave_due() or self._handover_due())
        if children.next_task < self.req.replicas:
            self._kill_unstarted()  # the job failed or was killed before its last waves started

    async def _record_ended(self) -> None:
        children = self.children
        unreleased: list[Release] = []
        while children.ended:
            index, result = children.ended.popleft()
            if index not in children.open:
                continue  # recorded already: its child's end and its TASK_ENDED signal both came
            children.open.discard(index)
            if result is None:
                result = ended_child(index, children.handles[index], self.table.status.tasks[index].attempt, unreleased)
            self._record(index, result)
        if unreleased:
            await release_for(unreleased)

    async def _started(self, start: Coroutine[Any, Any, bool]) -> None:
        """Start task children (job_waves); a job killed meanwhile cancels what started and ends the rest."""
        if not await start:
            self._cancel_running()
            self._kill_unstarted()

    def _kill_unstarted(self) -> None:
        unstarted = range(self.children.next_task, self.req.replicas)
        self.table.end_rows(unstarted, TaskState.KILLED, "killed before it started")
        self.children.next_task = self.req.replicas

    def _killing(self) -> bool:
        return self._phase is JobPhase.KILLING

    def _running(self) -> int:
        return self.table.counts.get(TaskState.RUNNING, 0)

    def _wave_due(self) -> bool:
        return self._phase is JobPhase.ACTIVE and self.children.wave_due(self.req.replicas, self._running())

    def _handover_due(self) -> bool:
        return handover_due(self.children, self._phase is JobPhase.ACTIVE)

    async def _continue_as_new(self) -> None:
        """Hand the job over to a new run with its tasks still running (job_handover)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._record_ended()
        if self._handover_due():
            self.memo.flush()
            hand_over(self.req, self.table, self.children, self.tree.has_children)

    async def _collect(self) -> None:
        """Wait for every member of a gang, reacting to each result as it arrives."""
        waiting = {h: i for i, h in self.children.handles.items() if not h.done()}
        for i, h in self.children.handles.items():
            if h.done() and self.table.status.tasks[i].state not in TERMINAL_TASK_STATES:
                waiting[h] = i
        while waiting:
            done, _ = await workflow.wait(list(waiting), return_when=asyncio.FIRST_COMPLETED)
            unreleased: list[Release] = []
            for handle in done:
                index = waiting.pop(handle)
                self._record(index, ended_child(index, handle, self.table.status.tasks[index].attempt, unreleased))
            if unreleased:
                await release_for(unreleased)

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
                self.children.handles.clear()
                self.table.reset(attempt)
                self._refresh_state()

    def _record(self, index: int, result: TaskResult) -> None:
        """A task ended: its row, then what it means for the job (a broken gang, a failed job)."""
        gang = bool(self.req.coschedule_group_by)
        self.table.record(index, result, gang=gang)
        state = TaskState(result.state)
        if gang and (state in (TaskState.FAILED, TaskState.WORKER_FAILED) or result.dispatch_failed):
            self._on(JobEvent.GANG_BROKE, cause=result)
        elif state == TaskState.UNSCHEDULABLE or self.table.failed_tasks() > self.req.max_task_failures:
            self._on(JobEvent.FAIL)
        self._refresh_state()

    def _refresh_state(self) -> None:
        """The counts into the status, and while the job is active, its state from them; the memo follows."""
        self.table.sync_counts()
        self.memo.publish()
        if self._phase is JobPhase.ACTIVE:  # otherwise the final state is decided once every task has stopped
            self.memo.set_state(self.table.state(self.req.max_task_failures))

    def _cancel_running(self) -> None:
        for handle in self.children.handles.values():
            if not handle.done():
                handle.cancel()
        adopted = self.children.adopted()  # started by an earlier run of this job
        if adopted:
            asyncio.get_running_loop().create_task(cancel_adopted(adopted))

    def _finish(self, state: JobState, error: str) -> pb.JobStatus:
        """Record the final state; a job that did not succeed also fails its workflow.

        Failing the workflow makes the Temporal UI's status and "Failures" view
        agree with the job (the JobStatus rides along as the failure's details).
        """
        status = self.table.status
        status.error = cap_text(error, MAX_JOB_ERROR_CHARS) if state != JobState.SUCCEEDED else ""
        status.finished_at = workflow.now().timestamp()
        self.memo.set_state(state)
        self.memo.flush()
        result = summary_status(status)  # a 10,000-task table whole would pass the 2 MB payload limit
        if state != JobState.SUCCEEDED:
            raise ApplicationError(
                f"job {state}: {status.error}", result, type=f"Job{state.title()}", non_retryable=True
            )
        return result

