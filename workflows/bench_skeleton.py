"""The bench's design skeleton (`python -m iris.bench`): an Iris job's shape with none of Iris's logic.

Each piece is one the design prescribes, reduced to its Temporal traffic: a job workflow
that starts one child per task and hands it to a singleton scheduler by a (coalesced)
signal sent from a local activity; a scheduler that runs each pass as a regular activity
and tells the placed tasks by a local activity's signals; a task workflow that waits for
its assignment and runs its attempt as an activity on the agent's own task queue; an agent
(another process) that starts the task's process, heartbeats once, tells the job the task
runs and gives the place back by (coalesced) signal; and the job's state published to its
search attribute and memo when it changes. Every workflow runs in the SDK's sandbox.

What is left out is Iris: validation, the scheduling function and its data, the state
tables, task areas, logs, blobs, retries, continue-as-new. The skeleton's rate is the
ceiling of the design on this server; Iris's rate against it is what Iris's own code costs.
Not Iris workflows (`workflows.registry` does not list them); beside `bench_bare` for the
same reason (this package's `__init__` is empty, so a sandbox re-imports this module only).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey

SKELETON_JOB = "IrisBenchSkeletonJob"
SKELETON_TASK = "IrisBenchSkeletonTask"
SKELETON_SCHEDULER = "IrisBenchSkeletonScheduler"
SIGNAL_ACTIVITY = "iris_bench_skeleton_signal"
"""Local activity: send `[workflow_id, signal, arg]` triples (enqueues coalesced per receiver)."""
PASS_ACTIVITY = "iris_bench_skeleton_pass"
"""The scheduling pass: takes the queued task ids, returns them placed (no scheduling is done)."""
RUN_ACTIVITY = "iris_bench_skeleton_run"
"""On the agent's queue: run `true`, tell the job it runs, give the place back."""
STATE = SearchAttributeKey.for_keyword("IrisJobState")
"""The search attribute Iris's jobs publish their state to (registered on the local cluster's server)."""
ENQUEUE = "enqueue_batch"
RELEASE = "release_batch"
TIMEOUT = timedelta(seconds=60)


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
        child = await workflow.start_child_workflow(SkeletonTask.run, scheduler_id, id=task_id)
        await workflow.execute_local_activity(
            SIGNAL_ACTIVITY, [[scheduler_id, ENQUEUE, task_id]], start_to_close_timeout=TIMEOUT
        )
        await workflow.wait_condition(lambda: self.running or child.done())
        if not child.done():
            publish("RUNNING")
        result: float = await child
        publish("SUCCEEDED")
        return result


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
    async def run(self, scheduler_id: str) -> float:
        """The agent's result, once the attempt ran."""
        await workflow.wait_condition(lambda: self.queue is not None)
        parent = workflow.info().parent
        result: float = await workflow.execute_activity(
            RUN_ACTIVITY,
            args=[parent.workflow_id if parent else "", scheduler_id, workflow.info().workflow_id],
            result_type=float,
            task_queue=self.queue,
            schedule_to_start_timeout=timedelta(seconds=5),
            start_to_close_timeout=TIMEOUT,
            heartbeat_timeout=timedelta(seconds=6),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return result


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
