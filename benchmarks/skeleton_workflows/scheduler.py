"""The skeleton's singleton scheduler workflow (see the package docstring)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from benchmarks.skeleton_workflows.names import (
        ENQUEUE,
        PASS_ACTIVITY,
        RELEASE,
        SIGNAL_ACTIVITY,
        SKELETON_SCHEDULER,
        TIMEOUT,
    )


@workflow.defn(name=SKELETON_SCHEDULER)
class SkeletonScheduler:
    """The singleton: each pass takes what queued, runs the pass activity, tells every placed task."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.released = 0

    @workflow.signal(name=ENQUEUE)
    def enqueue(self, task_ids: list[str]) -> None:
        """Tasks to place."""
        self.queue.extend(task_ids)

    @workflow.signal(name=RELEASE)
    def release(self, task_ids: list[str]) -> None:
        """Places given back."""
        self.released += len(task_ids)

    @workflow.run
    async def run(self, agent_queue: str) -> None:
        """Pass while anything is queued; runs until terminated."""
        while True:
            await workflow.wait_condition(lambda: bool(self.queue))
            batch, self.queue = self.queue, []
            placed: list[str] = await workflow.execute_activity(
                PASS_ACTIVITY, batch, result_type=list[str], start_to_close_timeout=TIMEOUT
            )
            await workflow.execute_local_activity(
                SIGNAL_ACTIVITY, [[t, "assigned", agent_queue] for t in placed], start_to_close_timeout=TIMEOUT
            )
