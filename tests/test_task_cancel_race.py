"""A job killed as it starts its tasks gives back the places of those cancelled before they ever ran.

A task workflow cancelled before its first workflow task runs ends CANCELED without running a line of its own, so
it cannot release its place, and the scheduler may have placed it meanwhile (seen in CI: the place and its user's
running count stayed taken for good). Here the task children wait on the control queue, where nothing polls until
the job has been killed: their first workflow task is the cancellation, every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

from temporalio.client import WorkflowFailureError
from temporalio.worker import Worker

from activities.contracts import CONTROL_TASK_QUEUE, ENQUEUE, KILL_JOB, RELEASE_BATCH, SCHEDULER_WORKFLOW_ID
from activities.proto import cluster_pb2 as pb
from activities.signals import deliver_signals
from iris.controller.control_plane import controller_runner
from iris.deploy.temporal_setup import ensure_search_attributes
from iris.deploy.worker_versioning import deployment_config
from tests.support import TEST_BUILD, workflows_on_dev_server
from tests.test_task_worker_lost import SchedulerSink
from workflows.jobs.job_workflow import JobWorkflow
from workflows.tasks.task_workflow import TaskWorkflow


async def test_a_job_killed_as_it_starts_gives_back_its_unstarted_tasks_places() -> None:
    async with workflows_on_dev_server("cancel-race", [JobWorkflow, SchedulerSink], [deliver_signals]) as (
        client,
        queue,
    ):
        assert all(step.outcome != "failed" for step in await ensure_search_attributes(client))  # a task's kind
        scheduler = await client.start_workflow(SchedulerSink.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        job_id = f"race-{uuid.uuid4().hex[:8]}"
        req = pb.JobRequest(job_id=job_id, user="ana", replicas=2, submitted_at=1.0,
                            resources=pb.Resources(cpu_millis=100, memory_bytes=1 << 26),
                            entrypoint=pb.Entrypoint(command=pb.Command(argv=["true"])))  # fmt: skip
        job = await client.start_workflow("JobWorkflow", req, id=job_id, task_queue=queue)

        async with asyncio.timeout(30):  # the job enqueued its tasks (their children wait for a poller)
            while not any(name.startswith(ENQUEUE) for name, _ in await scheduler.query(SchedulerSink.signals)):  # noqa: ASYNC110 - another workflow's state
                await asyncio.sleep(0.1)
        await job.signal(KILL_JOB, "killed as it started")
        control = deployment_config(TEST_BUILD)
        async with Worker(client, task_queue=CONTROL_TASK_QUEUE, workflows=[TaskWorkflow],
                          workflow_runner=controller_runner(), deployment_config=control):  # fmt: skip
            with contextlib.suppress(WorkflowFailureError):
                await asyncio.wait_for(job.result(), timeout=60)
        received = await scheduler.query(SchedulerSink.signals)
    # Both tasks' places, at the attempt they were enqueued with: neither could give its place back itself.
    released = [(r["task_index"], r["attempt"]) for name, data in received if name == RELEASE_BATCH
                for r in json.loads(data)]  # fmt: skip
    assert [(0, 0), (1, 0)] == sorted(released), received
