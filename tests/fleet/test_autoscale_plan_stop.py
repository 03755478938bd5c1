"""A plan asking a scheduler that cannot answer gives up when its controller begins to stop.

The stopping controller's worker takes no more workflow tasks, so a scheduler whose next task it holds never
answers the plan's query; the plan, a local activity, holds the autoscaler's workflow task, and the worker's
shutdown waits for that task. Before, `iris cluster down` then waited out its grace and SIGKILLed the controller.
Here the scheduler is a workflow no worker serves: the query can only time out, and the plan must not wait for it.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.autoscaling import autoscale_plan
from activities.contracts import SCHEDULER_WORKFLOW_ID
from activities.contracts.fleet import PlanInput, PlanResult
from tests.support import TEMPORAL, WAL_ARGS


async def test_a_plan_waiting_for_the_scheduler_gives_up_when_its_controller_stops() -> None:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(TEMPORAL), dev_server_extra_args=WAL_ARGS)
    try:
        # A scheduler run on a queue nobody polls: its query waits for a worker until the rpc timeout.
        await env.client.start_workflow("SchedulerWorkflow", id=SCHEDULER_WORKFLOW_ID,
                                        task_queue=f"nobody-{uuid.uuid4().hex[:8]}")  # fmt: skip
        activities = ActivityEnvironment(client=env.client)
        plan = asyncio.ensure_future(activities.run(autoscale_plan, PlanInput(groups=[], slices=[], now=0.0)))
        # Not a race the test depends on: stopped before or during the query, the plan must not wait for it.
        activities.worker_shutdown()
        result: PlanResult = await asyncio.wait_for(plan, timeout=60)
        assert "controller stopping" == result.error  # not "scheduler not answering", the query's timeout
    finally:
        await env.shutdown()
