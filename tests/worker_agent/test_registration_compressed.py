"""An agent's registration goes compressed; a scheduler that cannot read it still registers the agent.

A 64-host slice's registration is 16.4 KiB of protobuf, mostly repeated names; compressed it is 0.6 KiB, and in a
storm of registrations that is what the server writes and the scheduler's task reads. A scheduler of an earlier
release knows no compressed encoding: it drops the signal (payload_guard), and the agent, unanswered, sends the
next try as earlier releases did. Both against the real scheduler and monitor on a dev server.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.converter import DataConverter

from activities.contracts import CONTROL_TASK_QUEUE, SCHEDULER_WORKFLOW_ID, WORKER_SESSION, WorkerSessionInput
from activities.contracts.worker_rows import batch_of_rows
from activities.proto import cluster_pb2 as pb
from activities.proto.values import ZSTD_PROTOBUF_ENCODING, set_attr
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from iris.deploy.temporal_setup import ensure_search_attributes
from iris.security.codec import data_converter
from tests.support import workflows_on_dev_server
from worker_agent.registration import register_hosts
from workflows.fleet.worker_workflow import WorkerWorkflow
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

HOSTS = 64
ANSWER_WAIT = 3.0  # seconds an agent waits for the answer before it asks again


@activity.defn(name=WORKER_SESSION)
async def session_beats(_: WorkerSessionInput) -> None:
    """The agent's liveness session: beats until the worker stops."""
    while True:
        activity.heartbeat()
        await asyncio.sleep(1.0)


def _slice_host(index: int) -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(worker_id=f"v5p-7f3a-w{index}", host=f"10.130.0.{index + 2}", agent_session="s0")
    meta.capacity.cpu_millis, meta.capacity.memory_bytes, meta.capacity.tpus = 208_000, 448 * 2**30, 4
    for key, value in {"tpu-name": "v5p-7f3a", "zone": "us-central2-b", "tpu-worker-id": str(index)}.items():
        set_attr(meta.attributes[key], value)
    return meta


async def _register(converter: DataConverter | None) -> tuple[dict[str, str], list[tuple[bytes, int]], int]:
    """One 64-host agent against the scheduler on a worker converting with `converter`: what was refused, each
    `register_workers` signal's (encoding, bytes) in the scheduler's history, and the healthy workers it counts."""
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler, session_beats]
    async with workflows_on_dev_server(
        "reg-zstd", [SchedulerWorkflow, WorkerWorkflow], activities, queue=CONTROL_TASK_QUEUE, data_converter=converter
    ) as (client, queue):
        assert all(step.outcome != "failed" for step in await ensure_search_attributes(client))  # the monitor's kind
        scheduler = await client.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        hosts = [_slice_host(i) for i in range(HOSTS)]
        session = WorkerSessionInput(
            hosts[0].worker_id, "s0", announced=True, more_worker_ids=[h.worker_id for h in hosts[1:]], task_queue=queue
        )
        refused = await register_hosts(client, session, hosts, timeout=60, answer_wait=ANSWER_WAIT)
        healthy = int(await scheduler.query("healthy_worker_count"))
        signals = [
            e.workflow_execution_signaled_event_attributes.input.payloads[0]
            async for e in scheduler.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and e.workflow_execution_signaled_event_attributes.signal_name == "register_workers"
        ]
        await scheduler.terminate("test done")
    return refused, [(p.metadata["encoding"], len(p.data)) for p in signals], healthy


async def test_a_registration_goes_compressed_and_is_read_at_the_first_try() -> None:
    refused, signals, healthy = await _register(data_converter(None))  # Iris's converter, as a controller's
    plain = batch_of_rows([_slice_host(i) for i in range(HOSTS)], "monitor")[0].ByteSize()
    assert {} == refused
    assert HOSTS == healthy
    assert [ZSTD_PROTOBUF_ENCODING] == [encoding for encoding, _ in signals]  # one try, answered
    assert signals[0][1] * 10 < plain, (signals, plain)


async def test_a_scheduler_that_cannot_read_it_hears_the_next_try_sent_plain() -> None:
    """The SDK's own converter stands in for a scheduler of an earlier release: it knows binary/protobuf only."""
    refused, signals, healthy = await _register(None)
    assert {} == refused
    assert HOSTS == healthy
    assert [ZSTD_PROTOBUF_ENCODING, b"binary/protobuf"] == [encoding for encoding, _ in signals]
