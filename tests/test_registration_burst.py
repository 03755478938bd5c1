"""A burst of registrations is admitted in the workflow task it comes in, in arrival order.

A restarted fleet's agents register together, and the server hands every signal buffered meanwhile
to one workflow task. Agents send their hosts as rows they checked (activities/contracts/worker_rows.py),
which the scheduler keeps as they are, so the burst needs no task of its own: a cordon sent after the
registration finds the worker, and the agent hears about every host it sent, refused ones included.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():  # the sandbox re-imports this module for the probe
    from activities.contracts import REGISTERED
    from activities.contracts.worker_rows import batch_of_rows
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import binary_payload
    from activities.recovery import rebuild_scheduler
    from activities.scheduling import find_assignments_activity
    from activities.signals import deliver_assignments, deliver_signals
    from iris.controller.control_plane import controller_replayer
    from tests.support import workflows_on_dev_server
    from workflows.messages import CordonWorkers, RegistrationReply
    from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

HOSTS = 2_500  # with the budget this replaced, three workflow tasks' worth
REFUSED = "h-bad"


@workflow.defn(name="RegistrationProbe", versioning_behavior=VersioningBehavior.PINNED)
class RegistrationProbe:
    """Stands in for an agent's WorkerWorkflow: waits for the scheduler's answer and returns it."""

    def __init__(self) -> None:
        self._reply: RegistrationReply | None = None

    @workflow.signal(name=REGISTERED)
    def registered(self, reply: RegistrationReply) -> None:
        self._reply = reply

    @workflow.run
    async def run(self) -> dict[str, str]:
        await workflow.wait_condition(lambda: self._reply is not None)
        assert self._reply is not None
        return dict(self._reply.refused)


def _host(worker_id: str, session: str = "s") -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(worker_id=worker_id, host="127.0.0.1", agent_session=session)
    meta.capacity.cpu_millis = 1000
    meta.capacity.memory_bytes = 2**30
    return meta


def _burst(reply_to: str) -> pb.WorkerBatch:
    """The hosts as an agent sends them (rows), and one as metadata, which the scheduler checks and refuses."""
    batch, refused = batch_of_rows([_host(f"h{host}") for host in range(HOSTS)], reply_to)
    assert {} == refused
    batch.workers.add(worker_id=REFUSED, host="127.0.0.1", agent_session="s")  # no capacity: refused
    return batch


async def test_a_registration_burst_is_admitted_where_it_comes_in_and_keeps_arrival_order() -> None:
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    workflows = [SchedulerWorkflow, RegistrationProbe]
    async with workflows_on_dev_server("sched-burst", workflows, activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        probe = await client.start_workflow(RegistrationProbe.run, id=f"{queue}-probe", task_queue=queue)
        await handle.signal("register_workers", binary_payload(_burst(probe.id)))
        last = f"h{HOSTS - 1}"
        await handle.signal("cordon_workers", CordonWorkers(["h0", last], True, "after the registration"))
        refused = await probe.result(rpc_timeout=timedelta(seconds=60))
        workers = {w.worker_id: w for w in (await handle.query("workers")).workers}
        events = [e async for e in handle.fetch_history_events()]
        history = await handle.fetch_history()
        await handle.terminate("test done")

    assert [REFUSED] == list(refused), refused  # one answer, for every host of the batch
    assert "capacity" in refused[REFUSED]
    assert HOSTS == len(workers)
    assert all(w.healthy for w in workers.values())
    assert {"h0", last} == {w.worker_id for w in workers.values() if w.cordoned}  # the cordon came after
    kinds = {e.activity_task_scheduled_event_attributes.activity_type.name for e in events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}  # fmt: skip
    assert kinds <= {"find_assignments", "deliver_signals", "deliver_assignments", "rebuild_scheduler"}  # no pause
    failed = [e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert [] == failed
    replayed = await controller_replayer([SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_many_agents_batches_at_once_are_all_admitted_and_answered() -> None:
    """Many agents' batches at once: each agent hears back, and the count reaches every host."""
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("sched-burst-many", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        agents, per_agent = 30, 100
        batches = []
        for agent in range(agents):
            hosts = [_host(f"a{agent}-h{host}", f"s{agent}") for host in range(per_agent)]
            batches.append(batch_of_rows(hosts, f"no-such-agent-{agent}")[0])
        await asyncio.gather(*(handle.signal("register_workers", binary_payload(b)) for b in batches))
        count = 0
        for _ in range(300):
            count = int(await handle.query("healthy_worker_count"))
            if count == agents * per_agent:
                break
            await asyncio.sleep(0.1)
        history = await handle.fetch_history()
        await handle.terminate("test done")
    assert agents * per_agent == count
    replayed = await controller_replayer([SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
