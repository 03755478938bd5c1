"""A job larger than its first wave starts the rest of its tasks as earlier ones run and end."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHistory

from activities.contracts import task_workflow_ids
from iris import IrisClient, JobState, ResourceSpec
from iris.controller.control_plane import controller_replayer
from tests.support import wait_until
from workflows.jobs.job_waves import MAX_PENDING_CHILDREN, WAVE_FLOOR

REPLICAS = WAVE_FLOOR + 50


def open_children_over_time(client: IrisClient, job_id: str) -> list[int]:
    """How many task children the job had open after each child start or end in its history."""

    async def fetch() -> list[int]:
        opened, trace = 0, []
        async for event in client._async.temporal.get_workflow_handle(job_id).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                opened += 1
            elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
                opened -= 1
            else:
                continue
            trace.append(opened)
        return trace

    return client._run(fetch())


async def _all_completed(client: IrisClient, workflow_ids: list[str]) -> bool:
    """Whether every one of these workflows has closed as completed."""
    temporal = client._async.temporal
    described = await asyncio.gather(*(temporal.get_workflow_handle(i).describe() for i in workflow_ids))
    return all(d.status == WorkflowExecutionStatus.COMPLETED for d in described)


def test_a_job_past_its_first_wave_runs_every_task_once_in_waves(client: IrisClient) -> None:
    """450 tasks: 400 start at once, the rest as places free up; all succeed, never past Temporal's limits."""
    resources = ResourceSpec(cpu=0.1, memory="16m", replicas=REPLICAS)
    job = client.submit_command(["true"], name="waves", resources=resources)
    status = job.wait(timeout=300)
    assert JobState.SUCCEEDED == status.state
    assert {"SUCCEEDED": REPLICAS} == status.task_state_counts
    trace = open_children_over_time(client, job.job_id)
    first_end = next(i for i, (before, after) in enumerate(zip([0, *trace], trace, strict=False)) if after < before)
    assert WAVE_FLOOR == trace[first_end - 1]  # the first wave is the floor, not the whole job
    assert max(trace) <= MAX_PENDING_CHILDREN
    # A job this large continues as new with its tasks running, so its children are abandoned at a run's close
    # and report their end by signal: the job may end before the last children's completions land in its
    # history (seen: 4 open at its close). Every task child completes, in the job's history or after it.
    ids = list(task_workflow_ids(job.job_id, range(REPLICAS)))
    wait_until(lambda: client._run(_all_completed(client, ids)), timeout=60, what="every task child completed")
    assert REPLICAS == sum(1 for before, after in zip([0, *trace], trace, strict=False) if after > before)

    async def history() -> WorkflowHistory:
        return await client._async.temporal.get_workflow_handle(job.job_id).fetch_history()

    replayed = client._run(controller_replayer().replay_workflow(client._run(history())))
    assert replayed.replay_failure is None  # the waves' history replays
