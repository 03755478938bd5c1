"""The skeleton's task workflow (see the package docstring)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from benchmarks.skeleton_workflows.names import RUN_ACTIVITY, SKELETON_TASK, TIMEOUT


@workflow.defn(name=SKELETON_TASK)
class SkeletonTask:
    """One attempt: wait for the scheduler's assignment, run on that agent's queue."""

    def __init__(self) -> None:
        self.queue: str | None = None

    @workflow.signal(name="assigned")
    def assigned(self, queue: str) -> None:
        """Placed: run on the agent polling `queue`."""
        self.queue = queue

    @workflow.run
    async def run(self) -> float:
        """The agent's result, once the attempt ran."""
        await workflow.wait_condition(lambda: self.queue is not None)
        parent = workflow.info().parent
        result: float = await workflow.execute_activity(
            RUN_ACTIVITY,
            args=[parent.workflow_id if parent else "", workflow.info().workflow_id],
            result_type=float,
            task_queue=self.queue,
            schedule_to_start_timeout=timedelta(seconds=5),
            start_to_close_timeout=TIMEOUT,
            heartbeat_timeout=timedelta(seconds=6),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return result
