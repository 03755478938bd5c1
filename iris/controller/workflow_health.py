"""Whether a workflow's tasks are failing, read from Temporal without asking the workflow anything.

A workflow whose workflow task fails (a non-determinism error, a bug in its code) stops making progress
and cannot be queried ("Unable to query workflow due to Workflow Task in failed state"), but nothing else
says so: a status command or a readiness check would wait for a timeout. Describe shows the pending
workflow task and its attempt; the failure itself is the newest WORKFLOW_TASK_FAILED event, read from the
end of the history (one small page). `iris cluster status`, the local cluster's readiness check, the
dashboard and the controller's `/health` use this for the scheduler.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client

from iris.query_retry import LOOKAHEAD_REFUSED

# A failed workflow task is retried at once; one more attempt is already a failure, not a slow task.
FAILING_FROM_ATTEMPT = 2
FAILING_CHECK_AFTER = 1.0
"""A query to a workflow unanswered this long makes its readers look whether its workflow task is failing (one
describe): a failing task answers nothing, and waiting out the query's timeout only delays saying so."""


async def workflow_task_failure(client: Client, workflow_id: str) -> str | None:
    """The error of `workflow_id`'s failing workflow task ("…: <message>"), or None while it is not failing."""
    described = await client.get_workflow_handle(workflow_id).describe()
    pending = described.raw_description.pending_workflow_task
    if not described.raw_description.HasField("pending_workflow_task") or pending.attempt < FAILING_FROM_ATTEMPT:
        return None
    reply = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=described.raw_description.workflow_execution_info.execution,
            maximum_page_size=50,
        )
    )
    for event in reply.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            message = event.workflow_task_failed_event_attributes.failure.message
            if message.startswith(LOOKAHEAD_REFUSED) and pending.attempt == FAILING_FROM_ATTEMPT:
                return None  # the look-ahead guard evicted the run: its retry replays it (lookahead_guard)
            return f"attempt {pending.attempt}: {message.splitlines()[0] if message else 'no message'}"
    return f"attempt {pending.attempt}: the failure is not in the last 50 events"


def failing_line(workflow: str, failure: str) -> str:
    """The one line every surface shows."""
    return f"{workflow} workflow task failing: {failure}"


async def served_since_last_signal(client: Client, workflow_id: str, signal: str, page: int = 50) -> bool:
    """Whether a workflow task completed after the newest `signal` (within the last `page` events).

    A controller signals the scheduler `configure` as it starts; once a task completed after that, a live
    controller holds the run and the server sends queries there. A query before then can reach a controller
    that must replay the run to answer, and the SDK applies the signals that came since its last task while
    answering (docs/reliability.md, "Replays"): readers that start with a controller wait for this first.
    """
    described = await client.get_workflow_handle(workflow_id).describe()
    reply = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=described.raw_description.workflow_execution_info.execution,
            maximum_page_size=page,
        )
    )
    for event in reply.history.events:  # newest first
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return True
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name == signal
        ):
            return False
    return True
