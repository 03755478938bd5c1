"""WorkerWorkflow: liveness of one worker agent, carried by activity heartbeats.

A long-running `worker_session` activity runs on the worker's own queue and
heartbeats every second. Heartbeats add no history events, so an idle worker
costs nothing; when they stop for HEARTBEAT_TIMEOUT (or the agent shuts
down), the scheduler is told the worker is lost and this workflow ends. A
restarted agent registers a new session and starts a fresh WorkerWorkflow.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import WORKER_SESSION, WorkerSessionInput
    from workflows.ids import SCHEDULER_WORKFLOW_ID, worker_task_queue
    from workflows.messages import WorkerLost

SESSION_HEARTBEAT_TIMEOUT = timedelta(seconds=6)
SESSION_START_TIMEOUT = timedelta(seconds=30)


@workflow.defn(name="WorkerWorkflow")
class WorkerWorkflow:
    @workflow.run
    async def run(self, session: WorkerSessionInput) -> str:
        workflow.set_current_details(f"worker {session.worker_id}: healthy")
        reason = "session ended"
        try:
            await workflow.execute_activity(
                WORKER_SESSION,
                session,
                task_queue=worker_task_queue(session.worker_id),
                schedule_to_start_timeout=SESSION_START_TIMEOUT,
                start_to_close_timeout=timedelta(days=3650),
                heartbeat_timeout=SESSION_HEARTBEAT_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=1),
                cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
            )
        except ActivityError as err:
            reason = str(err.cause) if err.cause else err.message
        await workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(
            "worker_lost", WorkerLost(session.worker_id, session.session, reason)
        )
        workflow.set_current_details(f"worker {session.worker_id}: lost ({reason})")
        return reason
