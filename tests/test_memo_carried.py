"""The scheduler's published tables survive its continue-as-new (workflows/memo.py).

Given no memo, the server starts the next run with the memo the closing run started with, so a reader of the
scheduler's memo (`iris reservation list`, `iris users`, the queue) saw the tables of the run's start until the next
run published again: a reservation listed as held, then "no reservations" a moment later (a suite run).
"""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from tests.support import memo_not_carried, workflows_on_dev_server
from workflows.messages import Enqueue, SchedulingSpec
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow
from workflows.scheduler.sharing_state import USERS_MEMO
from workflows.scheduler.teams_memo import QUEUE_MEMO

BUDGET = 12  # signals per run: the run continues as new once it took in this many
NEVER_FITS = SchedulingSpec(cpu_millis=10**9, memory_bytes=2**20, user="alice")  # stays queued: the queue shows it


def _host(agent: int) -> pb.WorkerBatch:
    batch = pb.WorkerBatch(reply_to=f"no-such-agent-{agent}")  # a reply to nobody is dropped
    meta = batch.workers.add(worker_id=f"w-{agent}", host="127.0.0.1", agent_session=f"s{agent}")
    meta.capacity.cpu_millis = 1000
    meta.capacity.memory_bytes = 2**30
    return batch


async def test_the_next_run_starts_with_the_tables_the_last_one_published() -> None:
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("sched-memo", [SchedulerWorkflow], activities) as (client, queue):
        started = await client.start_workflow(SchedulerWorkflow.run, args=[None, BUDGET], id=queue, task_queue=queue)
        first = client.get_workflow_handle(queue, run_id=started.first_execution_run_id)
        handle = client.get_workflow_handle(queue)
        await handle.signal("enqueue", Enqueue("job-a", NEVER_FITS, {0: 0, 1: 0}))
        for _ in range(100):  # a pass, then the tables published with alice's queued job
            if await (await handle.describe()).memo_value(USERS_MEMO, default=None):
                break
            await asyncio.sleep(0.1)
        for agent in range(BUDGET):  # the budget spent: the run continues as new
            await handle.signal("register_workers", _host(agent))
        for _ in range(300):
            if (await first.describe()).status != WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
        earlier = await first.fetch_history()
        later_id = earlier.events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        later = await client.get_workflow_handle(queue, run_id=later_id).fetch_history()
        await handle.terminate("test done")
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW == earlier.events[-1].event_type
    upserted = {
        key
        for e in earlier.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
        for key in e.workflow_properties_modified_event_attributes.upserted_memo.fields
    }
    assert {USERS_MEMO, QUEUE_MEMO} <= upserted  # what the first run published after it started
    assert [] == memo_not_carried(earlier, later)
