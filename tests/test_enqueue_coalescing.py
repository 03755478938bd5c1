"""Jobs' enqueues leave a controller as batch signals, and the scheduler queues every one of them.

One signal per job at a few hundred jobs a second kept the singleton's workflow
tasks force-closed (more than 100 signals buffered during each) until a run passed
the server's 10,000-signal limit; coalesced, a storm is a few signals a second.
"""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType

from activities.contracts import SCHEDULER_WORKFLOW_ID, Delivery, DeliveryOutcome
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
        await handle.terminate("test done")
