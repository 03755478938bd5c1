"""Jobs' enqueues leave a controller as batch signals, and the scheduler queues every one of them.

One signal per job at a few hundred jobs a second kept the singleton's workflow
tasks force-closed (more than 100 signals buffered during each) until a run passed
the server's 10,000-signal limit; coalesced, a storm is a few signals a second.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.api.enums.v1 import EventType

from activities.contracts import SCHEDULER_WORKFLOW_ID, Delivery, DeliveryOutcome
from activities.contracts.dataclass_json import to_plain
from activities.contracts.queueing import ConstraintSpec, EnqueueBatch
from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import ASSIGN_PATIENCE, send_signals
from tests.support import workflows_on_dev_server
from workflows.messages import Enqueue, SchedulingSpec
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

JOBS = 400


async def test_a_storm_of_job_enqueues_reaches_the_scheduler_whole_in_a_few_signals() -> None:
    activities = [find_assignments_activity, rebuild_scheduler]
    async with workflows_on_dev_server("coalescing", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        never_fits = SchedulingSpec(cpu_millis=10**9, memory_bytes=1)  # stays queued: no worker is that big
        # Each job's local activity sends its own enqueue; they run side by side in one controller.
        sends = [
            send_signals(client, [Delivery(SCHEDULER_WORKFLOW_ID, "enqueue",
                                           Enqueue(f"job-{j}", never_fits, {0: 0, 1: 0}))], ASSIGN_PATIENCE)
            for j in range(JOBS)
        ]
        assert [DeliveryOutcome()] * JOBS == await asyncio.gather(*sends)  # every one delivered
        for _ in range(100):
            summary = await handle.query("summary", result_type=pb.ClusterSummary)
            if summary.pending_tasks == 2 * JOBS:
                break
            await asyncio.sleep(0.1)
        assert 2 * JOBS == summary.pending_tasks
        signals = [e async for e in handle.fetch_history_events()
                   if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]  # fmt: skip
        assert len(signals) < JOBS / 4, f"{len(signals)} signals for {JOBS} jobs"
        assert {"enqueue_batch"} == {e.workflow_execution_signaled_event_attributes.signal_name
                                     for e in signals}  # fmt: skip
        for event in signals:  # 400 jobs alike: each batch carries their spec once
            batch = json.loads(event.workflow_execution_signaled_event_attributes.input.payloads[0].data)
            assert 1 == len(batch["specs"]), batch["specs"]
        await handle.terminate("test done")


def test_a_batch_gives_back_every_enqueue_in_order_each_spec_once() -> None:
    """From enqueue objects or their JSON (what the signal activity receives), the same enqueues come back."""
    gpu = SchedulingSpec(cpu_millis=1000, memory_bytes=2**30, gpus=1, user="ana", band="batch",
                         constraints=[ConstraintSpec("zone", "IN", ["a", "b"]), ConstraintSpec("x", "EQ", True)])
    cpu = SchedulingSpec(cpu_millis=100, memory_bytes=2**20, ports=["http"])
    sent = [Enqueue("a", gpu, {0: 0, 1: 0, 2: 1}, 5.0), Enqueue("b", cpu, {7: 3}, 6.5), Enqueue("c", gpu, {0: 2}, 0.0)]
    as_received = [json.loads(json.dumps(to_plain(e))) for e in sent[1:]]  # dict keys as strings, as JSON has them
    batch = EnqueueBatch.of([sent[0], *as_received])
    assert [gpu, cpu] == batch.specs
    assert sent == batch.requests()
    assert True is batch.requests()[0].spec.constraints[1].value  # not 1: a bool stays a bool
    assert ["a", "b", "c"] == batch.job_ids and [3, 1, 1] == batch.task_counts


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [("task_counts", [3, 1], "task_counts"), ("spec", [0, 5], "spec"), ("attempts", [0], "attempts")],
)
def test_a_batch_whose_columns_disagree_is_refused_by_name(column: str, value: list[int], named: str) -> None:
    batch = EnqueueBatch.of([Enqueue("a", SchedulingSpec(1, 1), {0: 0}), Enqueue("b", SchedulingSpec(2, 1), {0: 0})])
    setattr(batch, column, value)
    with pytest.raises(ValueError, match=named):
        batch.requests()


async def test_a_malformed_enqueue_fails_its_own_sender_not_those_coalesced_with_it() -> None:
    """Enqueues as the signal activity receives them (JSON), one without its spec: its sender gets the error;
    the others, coalesced with it, are delivered and queued."""
    activities = [find_assignments_activity, rebuild_scheduler]
    async with workflows_on_dev_server("malformed", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        never_fits = to_plain(SchedulingSpec(cpu_millis=10**9, memory_bytes=1))
        args = [{"job_id": f"job-{j}", "spec": never_fits, "attempts": {"0": 0}} for j in range(20)]
        args[7] = {"job_id": "no-spec", "attempts": {"0": 0}}
        sends = [send_signals(client, [Delivery(SCHEDULER_WORKFLOW_ID, "enqueue", arg)], ASSIGN_PATIENCE)
                 for arg in args]  # fmt: skip
        outcomes = await asyncio.gather(*sends, return_exceptions=True)
        assert isinstance(outcomes[7], KeyError)
        assert [DeliveryOutcome()] * 19 == outcomes[:7] + outcomes[8:]
        for _ in range(100):
            summary = await handle.query("summary", result_type=pb.ClusterSummary)
            if summary.pending_tasks == 19:
                break
            await asyncio.sleep(0.1)
        assert 19 == summary.pending_tasks
        await handle.terminate("test done")


async def test_the_scheduler_queues_batches_and_lists_and_drops_a_broken_batch_alone() -> None:
    """A batch (columns), a list of enqueues (what a controller of an earlier build sends while a new one takes
    over) and a broken batch: the first two are queued whole, the broken one is dropped, no workflow task fails."""
    activities = [find_assignments_activity, rebuild_scheduler]
    async with workflows_on_dev_server("batches", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        never_fits = SchedulingSpec(cpu_millis=10**9, memory_bytes=1)
        broken = EnqueueBatch.of([Enqueue("broken", never_fits, {0: 0, 1: 0})])
        broken.task_counts = [5]
        await handle.signal("enqueue_batch", EnqueueBatch.of([Enqueue(f"new-{j}", never_fits, {0: 0, 1: 0})
                                                              for j in range(3)]))
        await handle.signal("enqueue_batch", broken)
        await handle.signal("enqueue_batch", [Enqueue("old", never_fits, {0: 0, 4: 1})])
        for _ in range(100):
            summary = await handle.query("summary", result_type=pb.ClusterSummary)
            if summary.pending_tasks == 8:
                break
            await asyncio.sleep(0.1)
        assert 8 == summary.pending_tasks  # 3 x 2 + 2, not the broken batch's 2
        history = await handle.fetch_history()
        await handle.terminate("test done")
        assert [] == [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
