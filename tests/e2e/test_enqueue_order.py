"""When a job hands its tasks to the scheduler: a small one with their start, a big one once they exist.

A small job enqueues its tasks in the workflow task that starts them (it saves submit-to-running
time; an assignment that arrives first waits for its task). A big first batch takes seconds to
start on a loaded server, so its enqueue waits until every task of the batch has started: its
assignments never wait for a task.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType

from iris import IrisClient, JobState, ResourceSpec
from workflows.jobs.job_waves import EARLY_ENQUEUE_MAX


def _enqueue_and_starts(client: IrisClient, job_id: str) -> tuple[int, list[int]]:
    """The event id of the job's enqueue (its first local activity marker) and of its children's starts."""

    async def fetch() -> tuple[int, list[int]]:
        marker, started = 0, []
        async for event in client._async.temporal.get_workflow_handle(job_id).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and not marker:
                marker = event.event_id
            elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                started.append(event.event_id)
        return marker, started

    return client._run(fetch())


def test_a_small_job_enqueues_with_its_start_and_a_big_one_after(client: IrisClient) -> None:
    small = client.submit_command(["true"], resources=ResourceSpec(cpu=0.1, memory="16m", replicas=2))
    big = client.submit_command(["true"], resources=ResourceSpec(cpu=0.1, memory="16m", replicas=EARLY_ENQUEUE_MAX + 8))
    for job in (small, big):
        assert JobState.SUCCEEDED == job.wait(timeout=120).state
    marker, started = _enqueue_and_starts(client, small.job_id)
    assert 2 == len(started) and marker < min(started)
    marker, started = _enqueue_and_starts(client, big.job_id)
    assert EARLY_ENQUEUE_MAX + 8 == len(started) and marker > max(started)
