"""The bench's bare workflows (`python -m benchmarks`): Temporal with none of Iris in it.

Not Iris workflows (`workflows.registry` does not list them): the baseline the bench measures
Iris against. They live in this package, not beside the bench, because a sandboxed worker
re-imports a workflow's module and its packages for every run, and this package's
`__init__` is empty: the sandboxed baseline pays for this module only, as a user's would.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

BARE_ACTIVITY = "iris_bench_noop"
PROCESS_ACTIVITY = "iris_bench_true"
BARE_WORKFLOW = "IrisBenchBare"
PARENT_WORKFLOW = "IrisBenchParent"


@workflow.defn(name=BARE_WORKFLOW)
class BareWorkflow:
    """A bare workflow that executes one activity (by default a no-op) and returns its result."""

    @workflow.run
    async def run(self, activity: str = BARE_ACTIVITY) -> float:
        """Run the activity with default retries; the result is the wall-clock time the activity began."""
        result: float = await workflow.execute_activity(
            activity, start_to_close_timeout=timedelta(seconds=30), result_type=float
        )
        return result


@workflow.defn(name=PARENT_WORKFLOW)
class ParentWorkflow:
    """A bare parent that runs one `BareWorkflow` as its child: an Iris job's shape, without Iris."""

    @workflow.run
    async def run(self, activity: str = BARE_ACTIVITY) -> float:
        """Start the child, wait for it, return its result."""
        result: float = await workflow.execute_child_workflow(
            BareWorkflow.run, activity, id=f"{workflow.info().workflow_id}/child"
        )
        return result
