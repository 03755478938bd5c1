"""The skeleton's job workflow (see the package docstring)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from benchmarks.skeleton_workflows.names import (
        ENQUEUE,
        SIGNAL_ACTIVITY,
        SKELETON_JOB,
        SKELETON_TASK,
        STATE,
        TIMEOUT,
    )


def publish(state: str) -> None:
    """Upsert the job's state to its search attribute and memo, as an Iris job does on each change."""
    workflow.upsert_search_attributes([STATE.value_set(state)])
    workflow.upsert_memo({"state": state})


@workflow.defn(name=SKELETON_JOB)
class SkeletonJob:
    """One task: start its child, enqueue it, publish RUNNING when the agent says so, then the end."""

    def __init__(self) -> None:
        self.running = False

    @workflow.signal(name="task_started")
    def task_started(self) -> None:
        """The agent started the task's process."""
        self.running = True

    @workflow.run
    async def run(self, scheduler_id: str) -> float:
        """The task's result: the wall-clock time its process was started."""
        task_id = f"{workflow.info().workflow_id}/task-0"
        child = await workflow.start_child_workflow(SKELETON_TASK, id=task_id, result_type=float)
        await workflow.execute_local_activity(
            SIGNAL_ACTIVITY, [[scheduler_id, ENQUEUE, task_id]], start_to_close_timeout=TIMEOUT
        )
        await workflow.wait_condition(lambda: self.running or child.done())
        if not child.done():
            publish("RUNNING")
        result: float = await child
        publish("SUCCEEDED")
        return result
