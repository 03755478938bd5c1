"""TaskAccessWorkflow: runs one `iris task exec` or `iris task profile` on the worker that runs the task.

Why a workflow: a client cannot start an activity by itself, and the agent listens on nothing but
its Temporal task queue (no port of its own), so the client starts this short workflow, which runs
the agent's activity on that worker's own queue and returns how it ended. Output does not pass
through here: the agent streams it to the log store, where the client reads it as it comes.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from activities.contracts import PROFILE_TASK, TaskAccessInput, TaskAccessResult, worker_task_queue

PICK_UP_TIMEOUT = timedelta(seconds=30)  # a worker that does not take the command by then is not serving
# The agent beats 4 times a second while the command runs; its SDK forwards a beat at most every 8 s (the task
# queue's throttle, worker_agent/agent.py): a timeout well above that.
HEARTBEAT_TIMEOUT = timedelta(seconds=15)
EXEC_LIMIT = timedelta(hours=24)  # an exec runs until it ends or the client stops waiting (and cancels)


@workflow.defn(name="TaskAccessWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class TaskAccessWorkflow:
    @workflow.run
    async def run(self, inp: TaskAccessInput) -> TaskAccessResult:
        limit = timedelta(seconds=inp.duration_seconds + 120) if inp.activity == PROFILE_TASK else EXEC_LIMIT
        try:
            return await workflow.execute_activity(
                inp.activity,
                inp,
                result_type=TaskAccessResult,
                task_queue=worker_task_queue(inp.worker_id),
                schedule_to_start_timeout=PICK_UP_TIMEOUT,
                start_to_close_timeout=limit,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=1),
                cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
                summary=f"{inp.activity} in task {inp.task_index} of {inp.job_id} on {inp.worker_id}",
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                raise
            if isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START:
                error = f"worker {inp.worker_id} did not take the command within {PICK_UP_TIMEOUT.seconds} s"
            elif isinstance(cause, TimeoutError):
                error = f"worker {inp.worker_id} stopped answering ({cause.type.name if cause.type else 'timeout'})"
            elif isinstance(cause, ApplicationError):
                error = f"worker {inp.worker_id}: {cause.message}"
            else:
                error = f"worker {inp.worker_id}: {err.message}"
            return TaskAccessResult(exit_code=-1, error=error)
