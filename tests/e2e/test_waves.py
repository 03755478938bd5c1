"""A job larger than its first wave starts the rest of its tasks as earlier ones run and end."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from iris import IrisClient, JobState, ResourceSpec
from iris.controller.control_plane import controller_replayer
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
    assert 0 == trace[-1]
    assert REPLICAS == sum(1 for before, after in zip([0, *trace], trace, strict=False) if after > before)

    async def history() -> WorkflowHistory:
        return await client._async.temporal.get_workflow_handle(job.job_id).fetch_history()

    replayed = client._run(controller_replayer().replay_workflow(client._run(history())))
    assert replayed.replay_failure is None  # the waves' history replays
