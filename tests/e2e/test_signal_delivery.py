"""`deliver_signals`, the local activity that carries the hot-path signals, against the session's dev server.

It must deliver to a running workflow (typed again by the receiver), and report
(not raise) a target that no longer runs or never existed: the scheduler gives
such a task's place back.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.contracts import Delivery
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


async def _deliver(address: str) -> None:
    client = await Client.connect(address)
    queue = f"iris-test-signals-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[SignalSink], workflow_runner=UnsandboxedWorkflowRunner()):
        live = await client.start_workflow(SignalSink.run, id=f"{queue}-live", task_queue=queue)
        ended = await client.start_workflow(SignalSink.run, id=f"{queue}-ended", task_queue=queue)
        await ended.signal(SignalSink.done)
        await ended.result()
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
