"""An agent's end reaches the scheduler as one signal for all of its hosts.

One agent process may serve many hosts (a liveness session's `more_worker_ids`). When its session ends,
its monitor (WorkerWorkflow) tells the scheduler once: one `worker_lost` per host made a 100-host agent's
end 100 history events and 100 log lines in the scheduler, 270 ms of its CPU for a burst of them in the
scale bench. Hosts registered since by another session stay as they are.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError

from activities.contracts import SCHEDULER_WORKFLOW_ID, WORKER_SESSION, WorkerSessionInput
from activities.contracts.worker_rows import batch_of_rows
from activities.proto import cluster_pb2 as pb
from activities.proto.values import binary_payload
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from iris.controller.control_plane import controller_replayer
from tests.support import workflows_on_dev_server
from tests.test_registration_burst import _host
from workflows.fleet.worker_workflow import WorkerWorkflow
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

HOSTS = 40
MOVED = "a0-h3"  # registered again by another agent's session before the first one ends


@activity.defn(name=WORKER_SESSION)
async def session_that_dies(session: WorkerSessionInput) -> None:
    """The agent's liveness session, ending as a dead agent's does."""
    raise ApplicationError("the agent died", non_retryable=True)


def _batch(session: str, worker_ids: list[str]) -> pb.WorkerBatch:
    hosts = [_host(worker_id, session) for worker_id in worker_ids]
    batch, refused = batch_of_rows(hosts, f"no-such-agent-{session}")  # an answer to nobody is dropped
    assert {} == refused
    return batch


async def test_an_agents_end_loses_its_hosts_in_one_signal() -> None:
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler,
                  session_that_dies]  # fmt: skip
    workflows = [SchedulerWorkflow, WorkerWorkflow]
    async with workflows_on_dev_server("worker-loss", workflows, activities) as (client, queue):
        scheduler = await client.start_workflow(SchedulerWorkflow.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        hosts = [f"a0-h{i}" for i in range(HOSTS)]
        await scheduler.signal("register_workers", binary_payload(_batch("s0", hosts)))
        await scheduler.signal("register_workers", binary_payload(_batch("s1", ["a1-h0", "a1-h1"])))
        await scheduler.signal("register_workers", binary_payload(_batch("s2", [MOVED])))
        session = WorkerSessionInput(hosts[0], "s0", more_worker_ids=hosts[1:], task_queue=queue)
        monitor = await client.start_workflow(WorkerWorkflow.run, session, id="worker-a0-s0", task_queue=queue)
        assert "the agent died" in await monitor.result(rpc_timeout=timedelta(seconds=60))
        healthy: dict[str, bool] = {}
        for _ in range(100):
            healthy = {w.worker_id: w.healthy for w in (await scheduler.query("workers")).workers}
            if not healthy.get(hosts[0], True):
                break
            await asyncio.sleep(0.1)
        events = [e async for e in scheduler.fetch_history_events()]
        history = await scheduler.fetch_history()
        await scheduler.terminate("test done")

    assert {h for h in hosts if h != MOVED} == {w for w, ok in healthy.items() if not ok}
    assert healthy[MOVED] and healthy["a1-h0"] and healthy["a1-h1"]
    lost = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and e.workflow_execution_signaled_event_attributes.signal_name == "worker_lost"]  # fmt: skip
    assert 1 == len(lost)
    replayed = await controller_replayer([SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
