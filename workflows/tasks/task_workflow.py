"""TaskWorkflow: the attempt loop of one task.

Per attempt: wait for the scheduler's assignment, run `run_task` on the
assigned worker's own task queue, classify the outcome, give the capacity
back, and retry within the task's failure and preemption budgets. Retries go
back through the scheduler rather than Temporal's activity retry, so a retry
never returns to a dead worker's queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError, TimeoutType

# Workflow code: sandboxed, as this module.
from workflows.tasks.attempt_stops import DISPATCH_TIMEOUT, evict, until_ended
from workflows.tasks.task_signals import send_and_go_on, until_delivered

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        ASSIGNED,
        CLAIM,
        DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
        DELIVER_SIGNALS,
        ENQUEUE,
        EVICT,
        LEASE_EXPIRED,
        LEASE_EXPIRED_REASON,
        PROCESS_STARTED,
        RELEASE,
        RUN_TASK,
        SCHEDULER_RESTARTED,
        SCHEDULER_WORKFLOW_ID,
        TASK_ENDED,
        TASK_RETRYING,
        TASK_STATUS_QUERY,
        UNSCHEDULABLE,
        Delivery,
        Release,
        RunTaskInput,
        RunTaskResult,
        StopTask,
        TaskNetwork,
        heartbeat_timeout_seconds,
        result_blob_key,
        worker_task_queue,
    )
    from workflows.messages import Assigned, Claim, Enqueue, Evict, TaskInput, TaskResult, TaskRetrying, Unschedulable
    from workflows.states import TERMINAL_TASK_STATES, TaskState
    from workflows.tasks.fencing import fence_seconds
    from workflows.tasks.task_lifecycle import UNKILLABLE, TaskEffect, TaskEvent, transition

# The default heartbeat timeout of an attempt; its worker's agent may declare another (--heartbeat-timeout, handed
# over with the placement: Assigned.heartbeat_timeout_seconds). The agent's lease beats at most every third of it
# (worker_agent/leases/lease_settings.py), its SDK's every 0.8 of it: ~3 missed beats = lost; the wait for the lease
# after the timeout (workflows/tasks/fencing.py) makes up the rest of lease + margin.
HEARTBEAT_TIMEOUT = timedelta(seconds=DEFAULT_HEARTBEAT_TIMEOUT_SECONDS)
RUN_FOREVER = timedelta(days=3650)
WORKER_SHUTDOWN = "WorkerShutdown"       # ApplicationError type the agent raises when it is stopped
TASK_WORKFLOW = "TaskWorkflow"  # its type name; a job starts it by name (for its result raw)
MAX_TRANSITIONS = 40  # the task's recorded state changes, oldest dropped first


@workflow.defn(name=TASK_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class TaskWorkflow:
    def __init__(self) -> None:
        self.state = TaskState.PENDING
        self.attempt = 0
        self._assigned: Assigned | None = None
        self._unschedulable: Unschedulable | None = None
        self._agent_released = False
        self.result = TaskResult(task_index=-1, state=TaskState.PENDING)
        self._input: TaskInput | None = None
        self._reporting: asyncio.Task[None] | None = None
        self._network: TaskNetwork | None = None  # the running attempt's ports and peers
        self._running: workflow.ActivityHandle[RunTaskResult] | None = None  # the attempt's run_task
        self._evicted: Evict | None = None  # the scheduler stopped this attempt for higher-band work

    @workflow.signal(name=EVICT)
    def evict(self, msg: Evict) -> None:
        """Stop the attempt for higher-band work: its agent sends SIGTERM and, after the cluster's grace,
        SIGKILL (`stop_task`); the attempt then counts a preemption, not a failure."""
        if msg.attempt != self.attempt or self.state not in (TaskState.ASSIGNED, TaskState.RUNNING):
            return
        if self._evicted is None:
            self._evicted = msg
            if self._running is not None and not self._running.done():
                asyncio.get_running_loop().create_task(self._evict(msg, self.result.worker_id))

    async def _evict(self, msg: Evict, worker_id: str) -> None:
        """The eviction's stop (attempt_stops.evict), for the attempt still running when this starts."""
        inp, running = self._input, self._running
        if inp is None or running is None:
            return
        stop = StopTask(inp.job_id, inp.task_index, msg.attempt, msg.grace_seconds, msg.reason)
        await evict(running, stop, worker_id)

    @workflow.signal(name=ASSIGNED)
    def assigned(self, msg: Assigned) -> None:
        if msg.attempt == self.attempt and self.state == TaskState.PENDING:
            self._assigned = msg

    @workflow.signal(name=UNSCHEDULABLE)
    def unschedulable(self, msg: Unschedulable) -> None:
        if msg.attempt == self.attempt and self.state == TaskState.PENDING:
            self._unschedulable = msg

    @workflow.signal(name=SCHEDULER_RESTARTED)
    def scheduler_restarted(self) -> None:
        """A scheduler that started empty asks where this task stands: it enqueues again or claims its place."""
        if self._input is not None and self._reporting is None:
            self._reporting = asyncio.get_running_loop().create_task(self._report(self._input))

    async def _report(self, inp: TaskInput) -> None:
        scheduler = workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID)
        try:
            if self._assigned is not None:
                worker, network = self._assigned.worker_id, self._assigned.network
            elif self.state in (TaskState.ASSIGNED, TaskState.RUNNING):
                worker, network = self.result.worker_id, self._network
            elif self.state == TaskState.PENDING and self._unschedulable is None:
                await self._enqueue(scheduler, Enqueue(inp.job_id, inp.spec, {inp.task_index: self.attempt},
                                                       inp.submitted_at))  # fmt: skip
                return
            else:
                return
            claim = Claim(inp.job_id, inp.task_index, self.attempt, worker, inp.spec,
                          dict(network.ports) if network else {})  # fmt: skip
            attempt = self.attempt

            def still_held() -> bool:
                return self.attempt == attempt and self.state not in TERMINAL_TASK_STATES

            await until_delivered(scheduler, CLAIM, claim, still_held)
        finally:
            self._reporting = None

    @workflow.query(name=TASK_STATUS_QUERY)
    def status(self) -> TaskResult:
        self.result.state = self.state
        self.result.attempt = self.attempt
        return self.result

    def _move(self, event: TaskEvent, note: str = "") -> tuple[TaskEffect, ...]:
        """Take `event` through the lifecycle table (InvalidTransition, failing the workflow task, if it
        cannot happen now); the effects the caller performs."""
        step = transition(self.state, event)
        self.state = step.next
        workflow.set_current_details(f"{self.state} (attempt {self.attempt})")
        self.result.transitions.append(f"{self.state}@{self.attempt}{' ' + note if note else ''}")
        del self.result.transitions[:-MAX_TRANSITIONS]
        return step.effects

    @workflow.run
    async def run(self, inp: TaskInput) -> TaskResult:
        result = await self._attempts(inp)
        if inp.report_end:
            await self._report_end(inp, result)
        return result

    async def _report_end(self, inp: TaskInput, result: TaskResult) -> None:
        """Send the result to the job's current run: a local activity, so the task ends in this workflow task.

        A job that no longer runs (it was terminated) is not an error: nobody is left to tell.
        Shielded: a kill that arrives now must not stop the job from hearing how the task ended.
        """
        parent = workflow.info().parent
        ended = dataclasses.replace(result, transitions=[])  # the job's table does not keep them
        delivery = Delivery(parent.workflow_id if parent else inp.job_id, TASK_ENDED, ended)
        report = asyncio.ensure_future(workflow.execute_local_activity(
            DELIVER_SIGNALS, [delivery], result_type=list[int], start_to_close_timeout=timedelta(seconds=30)
        ))  # fmt: skip
        while not report.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(report)

    async def _attempts(self, inp: TaskInput) -> TaskResult:
        self._input = inp
        self.result = TaskResult(task_index=inp.task_index, state=self.state)
        self.attempt = inp.first_attempt
        scheduler = workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID)
        needs_enqueue = not inp.enqueued_by_job
        try:
            while True:
                if workflow.cancellation_reason() is not None:  # a kill that an ending attempt took for its own
                    raise asyncio.CancelledError()
                if needs_enqueue:
                    request = Enqueue(inp.job_id, inp.spec, {inp.task_index: self.attempt}, inp.submitted_at)
                    asyncio.get_running_loop().create_task(self._enqueue(scheduler, request))
                    await asyncio.sleep(0)  # the signal's command goes out in this workflow task
                needs_enqueue = True
                await workflow.wait_condition(lambda: self._assigned is not None or self._unschedulable is not None)
                if self._unschedulable is not None:
                    self._move(TaskEvent.TIMED_OUT)
                    self.result.error = f"unschedulable: {self._unschedulable.reason}"
                    return self.status()
                assert self._assigned is not None
                self.result.worker_id, session = self._assigned.worker_id, self._assigned.session
                self._network = self._assigned.network
                self._move(TaskEvent.ASSIGNED, self._assigned.worker_id)
                self._agent_released = False
                self._evicted = None
                event, error, started = await self._run_attempt(inp, self._assigned)
                if started and self.state == TaskState.ASSIGNED:
                    # The process ran, even if it ended before anyone heard it started: record RUNNING.
                    self._move(TaskEvent.STARTED)
                self._assigned = None
                effects = self._move(event)
                if TaskEffect.RELEASE in effects and not self._agent_released:
                    # Awaited: the server drops a signal whose sender completes in the same workflow task.
                    failed_on = self.result.worker_id if event == TaskEvent.DISPATCH_FAILED else ""
                    release = Release(
                        inp.job_id, inp.task_index, self.attempt, dispatch_failed_on=failed_on,
                        dispatch_failed_session=session if failed_on else "",
                    )  # fmt: skip
                    await scheduler.signal(RELEASE, release)
                if event == TaskEvent.DISPATCH_FAILED:
                    if inp.gang:  # its job re-places the whole gang
                        self.result.dispatch_failed, self.result.error = True, error
                        return self.status()
                    self.attempt += 1
                    continue  # ENQUEUE
                self.result.error = error
                if TaskEffect.COUNT_FAILURE in effects:
                    self.result.failure_count += 1
                    exhausted = self.result.failure_count > inp.max_retries_failure
                elif TaskEffect.COUNT_PREEMPTION in effects:
                    self.result.preemption_count += 1
                    exhausted = self.result.preemption_count > inp.max_retries_preemption
                else:
                    return self.status()
                if exhausted:
                    return self.status()
                last_state = self.state
                effects = self._move(TaskEvent.RETRY)
                self.attempt += 1
                if TaskEffect.TELL_JOB in effects and (parent := workflow.info().parent):
                    retrying = TaskRetrying(
                        inp.task_index, self.attempt, self.result.failure_count,
                        self.result.preemption_count, last_state, error,
                    )
                    job = workflow.get_external_workflow_handle(parent.workflow_id)
                    await send_and_go_on(job, TASK_RETRYING, retrying)
        except asyncio.CancelledError:
            return await self._killed(inp)

    async def _killed(self, inp: TaskInput) -> TaskResult:
        """Cancelled by the job: the attempt is already stopped (WAIT_CANCELLATION_COMPLETED)."""
        if self.state not in UNKILLABLE:
            self._move(TaskEvent.KILLED)
        self.result.error = self.result.error or "killed"
        scheduler = workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID)
        await scheduler.signal(RELEASE, Release(inp.job_id, inp.task_index, self.attempt))
        return self.status()

    async def _enqueue(self, scheduler: workflow.ExternalWorkflowHandle[Any], request: Enqueue) -> None:
        """Enqueue this attempt; sent again with backoff while the server refuses the signal.

        Not awaited by the attempt loop (waiting for delivery would cost a workflow task on the
        path to running). The scheduler ignores an attempt it already has.
        """
        def still_waiting() -> bool:
            return self.state == TaskState.PENDING and self.attempt in request.attempts.values()

        await until_delivered(scheduler, ENQUEUE, request, still_waiting)

    async def _fence(self, cause: BaseException | None, worker_id: str, heartbeat_timeout: timedelta) -> bool:
        """After a heartbeat timeout, wait until the attempt's lease has surely run out; whether it held one.

        The agent renews the lease only with heartbeats the server recorded, so the attempt's
        processes are dead `lease` after the last heartbeat the server saw; the server timed the
        attempt out `heartbeat_timeout` after it. What is left of lease + margin is waited here, in
        the server's own time (docs/reliability.md). Shielded: a kill arriving meanwhile (a gang
        breaking up) must not let the job place the attempt again before its lease is gone.
        """
        if not (isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT):
            return False
        wait = fence_seconds(cause.last_heartbeat_details, heartbeat_timeout.total_seconds())
        if wait is None:
            return False
        if wait > 0:
            workflow.set_current_details(
                f"fencing attempt {self.attempt}: worker {worker_id} stopped renewing its lease; "
                f"placing it again in {wait:g} s, once the lease has surely expired"
            )
            timer = asyncio.ensure_future(workflow.sleep(wait))
            while not timer.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(timer)
        return True

    async def _run_attempt(self, inp: TaskInput, assigned: Assigned) -> tuple[TaskEvent, str, bool]:
        """Run one attempt: how it ended as a task event, an error message, and whether its process started."""
        worker_id = assigned.worker_id
        heartbeat_timeout = timedelta(seconds=heartbeat_timeout_seconds(assigned.heartbeat_timeout_seconds))
        request = RunTaskInput(
            job_id=inp.job_id,
            task_index=inp.task_index,
            num_tasks=inp.num_tasks,
            attempt=self.attempt,
            worker_id=worker_id,
            argv=inp.argv,
            function_blob=inp.function_blob,
            result_blob=result_blob_key(inp.job_id, inp.task_index, self.attempt) if inp.function_blob else "",
            env=inp.env,
            image=inp.image,
            bundle_blob=inp.bundle_blob,
            setup=list(inp.setup),
            launch_blob=inp.launch_blob,
            job_workflow_id=parent.workflow_id if (parent := workflow.info().parent) else "",
            cpu_millis=inp.spec.cpu_millis,
            memory_bytes=inp.spec.memory_bytes,
            num_slices=inp.spec.num_groups if inp.spec.num_groups > 1 else 0,
            network=self._network,
            namespace=inp.namespace,
            reservation_id=self._assigned.reservation_id if self._assigned is not None else "",
        )
        if self._evicted is not None:  # evicted before it was dispatched
            return TaskEvent.EVICTED, f"evicted before it started: {self._evicted.reason}", False
        try:
            self._running = workflow.start_activity(
                RUN_TASK,
                request,
                result_type=RunTaskResult,
                task_queue=worker_task_queue(worker_id),
                schedule_to_start_timeout=DISPATCH_TIMEOUT,
                start_to_close_timeout=RUN_FOREVER,
                heartbeat_timeout=heartbeat_timeout,
                retry_policy=RetryPolicy(maximum_attempts=1),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"task {inp.task_index} attempt {self.attempt} on {worker_id}",
            )
            kill = StopTask(inp.job_id, inp.task_index, self.attempt, 0.0, "killed", kill=True)
            result = await until_ended(self._running, kill, worker_id)
        except ActivityError as err:
            cause = err.cause
            fenced = await self._fence(cause, worker_id, heartbeat_timeout)
            if self._evicted is not None and workflow.cancellation_reason() is None:
                # Stopped for higher-band work by cancellation (the agent could not stop it with the grace).
                return TaskEvent.EVICTED, f"evicted on {worker_id}: {self._evicted.reason}", False
            if isinstance(cause, CancelledError) or workflow.cancellation_reason() is not None:
                # Killed while the attempt ended another way (its worker died, so it timed out): the kill wins.
                raise asyncio.CancelledError() from err
            if isinstance(cause, TimeoutError):
                if cause.type == TimeoutType.SCHEDULE_TO_START:
                    return TaskEvent.DISPATCH_FAILED, f"worker {worker_id} did not pick the task up", False
                kind = cause.type.name if cause.type else "timeout"
                started = PROCESS_STARTED in cause.last_heartbeat_details
                if fenced:
                    # A fencing agent starts the process right after a recorded heartbeat leased it: once one
                    # was recorded, the process may have run (the agent may have died before saying so).
                    return TaskEvent.WORKER_LOST, f"{LEASE_EXPIRED_REASON} (worker {worker_id}, {kind})", started
                if not started:  # a dispatch failure (re-queued, no budget spent), not a lost worker
                    error = f"worker {worker_id} timed out ({kind}) before the task started"
                    return TaskEvent.DISPATCH_FAILED, error, False
                return TaskEvent.WORKER_LOST, f"worker {worker_id} stopped heartbeating ({kind})", started
            if isinstance(cause, ApplicationError) and cause.type == WORKER_SHUTDOWN:
                return TaskEvent.WORKER_LOST, f"worker {worker_id} shut down", False
            if isinstance(cause, ApplicationError) and cause.type == LEASE_EXPIRED:
                return TaskEvent.WORKER_LOST, f"{LEASE_EXPIRED_REASON} (worker {worker_id})", True
            return TaskEvent.FAILED, f"worker {worker_id}: {cause if cause else err.message}", False
        finally:
            self._running = None
        self.result.peak_memory_bytes = result.peak_memory_bytes
        self.result.cpu_seconds, self.result.run_seconds = result.cpu_seconds, result.run_seconds
        if workflow.cancellation_reason() is not None and (result.exit_code or result.error):
            raise asyncio.CancelledError()  # killed: its agent stopped it and said what it had used
        self.result.exit_code = result.exit_code
        self.result.result_blob = result.result_blob
        self._agent_released = result.released
        if result.preempted:  # it ended after a notice for its host (an eviction is one): runs again, not a failure
            if self._evicted is not None:  # its agent stopped it for higher-band work, whatever it exited with
                return TaskEvent.EVICTED, f"evicted on {worker_id}: {self._evicted.reason}", result.started
            return TaskEvent.WORKER_LOST, f"preempted on {worker_id}: {result.preempted}", result.started
        if result.exit_code == 0 and not result.error:
            return TaskEvent.SUCCEEDED, "", True
        if self._evicted is not None:  # its agent stopped it for higher-band work
            return TaskEvent.EVICTED, f"evicted on {worker_id}: {self._evicted.reason}", result.started
        return TaskEvent.FAILED, result.error or f"exit code {result.exit_code}", result.started
