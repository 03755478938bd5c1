"""`deliver_signals`, the local activity that carries the hot-path signals, against the session's dev server.

It must deliver to a running workflow (typed again by the receiver), and report
(not raise) a target that no longer runs or never existed: the scheduler gives
such a task's place back. An assignment may reach a task its job is still
starting (the job enqueues in the workflow task that starts its children): that
one waits for the task instead.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.contracts import ASSIGNED, Delivery, task_workflow_id
from activities.signals import deliver_signals
from tests.support import Cluster


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


async def _assign_before_start(address: str) -> None:
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
        await asyncio.sleep(0.5)  # the job starts its task only now
        task = await client.start_workflow(SignalSink.run, id=late_task, task_queue=queue)
        assert [1, 2] == await sending
        assert [Note("your place", {0: 0})] == await task.query(SignalSink.received)
        for handle in (task, job):
            await handle.signal(SignalSink.done)
            await handle.result()


def test_an_assignment_waits_for_a_task_its_running_job_is_starting(cluster: Cluster) -> None:
    asyncio.run(_assign_before_start(cluster.info.address))
