"""`deliver_signals`, the local activity that carries the hot-path signals, against the session's dev server.

It must deliver to a running workflow (typed again by the receiver), and report
(not raise) a target that no longer runs or never existed: the scheduler gives
such a task's place back. An assignment may reach a task its job is still
starting (the job enqueues in the workflow task that starts its children): that
one waits for the task instead, apart from the scheduler's loop, which goes on
placing other jobs meanwhile.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities import signals
from activities.contracts import ASSIGNED, ENQUEUE, SCHEDULER_WORKFLOW_ID, Delivery, Release, task_workflow_id
from activities.signals import deliver_signals
from iris import IrisClient, JobState, ResourceSpec
from tests.support import Cluster
from workflows.messages import Assigned, Enqueue, SchedulingSpec


@dataclass
class Note:
    text: str
    attempts: dict[int, int]


@workflow.defn(name="IrisTestSignalSink")
class SignalSink:
    """Keeps the notes it is sent until told to stop."""

    def __init__(self) -> None:
        self.notes: list[Note] = []
        self.stop = False

    @workflow.signal
    def note(self, note: Note) -> None:
        self.notes.append(note)

    @workflow.signal(name=ASSIGNED)
    def assigned(self, note: Note) -> None:
        self.notes.append(note)

    @workflow.signal
    def done(self) -> None:
        self.stop = True

    @workflow.query
    def received(self) -> list[Note]:
        return self.notes

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.stop)
        return len(self.notes)


async def _live_and_ended(client: Client, queue: str) -> tuple[WorkflowHandle[Any, int], WorkflowHandle[Any, int]]:
    """A sink that runs and one that has ended."""
    live = await client.start_workflow(SignalSink.run, id=f"{queue}-live", task_queue=queue)
    ended = await client.start_workflow(SignalSink.run, id=f"{queue}-ended", task_queue=queue)
    await ended.signal(SignalSink.done)
    await ended.result()
    return live, ended


async def _deliver(address: str) -> None:
    client = await Client.connect(address)
    queue = f"iris-test-signals-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[SignalSink], workflow_runner=UnsandboxedWorkflowRunner()):
        live, ended = await _live_and_ended(client, queue)
        deliveries = [
            Delivery(live.id, "note", Note("placed", {3: 1})),
            Delivery(f"{queue}-never-started", "note", Note("lost", {})),
            Delivery(ended.id, "note", Note("late", {})),
        ]
        env = ActivityEnvironment(client=client)
        gone = await env.run(deliver_signals, deliveries)
        assert [1, 2] == gone
        notes = await live.query(SignalSink.received)
        assert [Note("placed", {3: 1})] == notes  # int keys survive the JSON round trip
        await live.signal(SignalSink.done)
        assert 1 == await live.result()


def test_delivers_to_running_workflows_and_reports_the_rest(cluster: Cluster) -> None:
    asyncio.run(_deliver(cluster.info.address))


async def _assign_before_start(address: str, waiting: asyncio.Event) -> None:
    client = await Client.connect(address)
    queue = f"iris-test-assign-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[SignalSink], workflow_runner=UnsandboxedWorkflowRunner()):
        job, ended_job = await _live_and_ended(client, queue)
        late_task = task_workflow_id(job.id, 0)
        deliveries = [
            Delivery(late_task, ASSIGNED, Note("your place", {0: 0})),
            Delivery(task_workflow_id(ended_job.id, 0), ASSIGNED, Note("job over", {})),
            Delivery(task_workflow_id(f"{queue}-no-such-job", 0), ASSIGNED, Note("no job", {})),
        ]
        env = ActivityEnvironment(client=client)
        sending = asyncio.create_task(env.run(deliver_signals, deliveries))
        await asyncio.wait_for(waiting.wait(), timeout=60)  # the task is missing, so the delivery waits for it
        task = await client.start_workflow(SignalSink.run, id=late_task, task_queue=queue)
        assert [1, 2] == await sending
        assert [Note("your place", {0: 0})] == await task.query(SignalSink.received)
        for handle in (task, job):
            await handle.signal(SignalSink.done)
            await handle.result()


def test_an_assignment_waits_for_a_task_its_running_job_is_starting(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = asyncio.Event()
    task_starting = signals._task_starting

    async def recorded(client: Client, task_id: str, patience: float) -> bool | None:
        waiting.set()  # the first signal found no task: the delivery now waits for it to start
        return await task_starting(client, task_id, patience)

    monkeypatch.setattr(signals, "_task_starting", recorded)
    asyncio.run(_assign_before_start(cluster.info.address, waiting))


@workflow.defn(name="IrisTestAssignedSink")
class AssignedSink:
    """Stands in for a task workflow: keeps the assignments it is sent until told to stop."""

    def __init__(self) -> None:
        self.assignments: list[Assigned] = []
        self.stop = False

    @workflow.signal(name=ASSIGNED)
    def assigned(self, assigned: Assigned) -> None:
        self.assignments.append(assigned)

    @workflow.signal
    def done(self) -> None:
        self.stop = True

    @workflow.query
    def received(self) -> list[Assigned]:
        return self.assignments

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.stop)
        return len(self.assignments)


async def _placed(client: Client, task_id: str) -> bool:
    workers = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query("workers")
    return any(task_id in w.running_tasks for w in workers.workers)


async def _scheduling_goes_on(address: str, iris: IrisClient) -> None:
    client = await Client.connect(address)
    queue = f"iris-test-late-{uuid.uuid4().hex[:8]}"
    workflows = [SignalSink, AssignedSink]
    async with Worker(client, task_queue=queue, workflows=workflows, workflow_runner=UnsandboxedWorkflowRunner()):
        job = await client.start_workflow(SignalSink.run, id=f"{queue}-job", task_queue=queue)
        late_task = task_workflow_id(job.id, 0)
        scheduler = client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
        await scheduler.signal(ENQUEUE, Enqueue(job.id, SchedulingSpec(cpu_millis=100, memory_bytes=2**20), {0: 0}))
        try:
            for _ in range(100):  # placed, so its "assigned" is on its way to a task that is not there
                if await _placed(client, late_task):
                    break
                await asyncio.sleep(0.05)
            # A job submitted now is placed by a later pass: it runs while that assignment still waits.
            other = await asyncio.to_thread(
                iris.submit_command, ["true"], resources=ResourceSpec(cpu=0.1, memory="50m")
            )
            assert JobState.SUCCEEDED == (await asyncio.to_thread(other.wait, timeout=20)).state
            # The task starts only now: the assignment still reaches it.
            task = await client.start_workflow(AssignedSink.run, id=late_task, task_queue=queue)
            received: list[Assigned] = []
            for _ in range(100):
                received = await task.query(AssignedSink.received)
                if received:
                    break
                await asyncio.sleep(0.1)
            assert [0] == [a.attempt for a in received]
            await task.signal(AssignedSink.done)
        finally:
            await scheduler.signal("release", Release(job.id, 0, 0))
            await job.signal(SignalSink.done)


def test_the_scheduler_places_other_jobs_while_an_assignment_waits_for_its_task(
    cluster: Cluster, client: IrisClient
) -> None:
    """A job whose task is slow to start (its controller died after its enqueue) holds up nobody else."""
    asyncio.run(_scheduling_goes_on(cluster.info.address, client))
