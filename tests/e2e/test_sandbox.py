"""The workflow sandbox is on for Iris's workflows: non-determinism fails the workflow task."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from iris.controller.control_plane import SANDBOX_PASSTHROUGH, workflow_runner
from tests.sandbox_probe import ClockReadingWorkflow
from tests.support import Cluster
from workflows.registry import ALL_WORKFLOWS


def test_no_module_defining_a_workflow_escapes_the_sandbox() -> None:
    """Passed-through modules are shared unchecked; none of them may hold an Iris workflow."""
    for wf in ALL_WORKFLOWS:
        module = wf.__module__
        assert not any(module == p or module.startswith(p + ".") for p in SANDBOX_PASSTHROUGH), module


async def test_a_workflow_reading_the_clock_is_caught(cluster: Cluster) -> None:
    """datetime.now() in workflow code fails the workflow task (the run never completes with a time)."""
    client = await Client.connect(cluster.info.address)
    queue = f"iris-sandbox-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[ClockReadingWorkflow], workflow_runner=workflow_runner()):
        handle = await client.start_workflow(ClockReadingWorkflow.run, id=queue, task_queue=queue)
        failure = ""
        for _ in range(300):
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    failure = event.workflow_task_failed_event_attributes.failure.message
            if failure:
                break
            await asyncio.sleep(0.1)
        await handle.terminate("sandbox probe done")
    assert "datetime.datetime.now" in failure, failure
