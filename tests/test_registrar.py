"""Registrations reach the scheduler through the registrar: a storm of them arrives one signal at a time.

A signal holds its workflow's lock in the Temporal server while it is written, so a storm of registrations sent
straight to the scheduler queued its own workflow-task completions behind them (docs/performance.md). Agents signal
the registrar instead; it hands on what came in meanwhile in one signal at a time. Real scheduler, registrar and
agents' registration code on a dev server.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from activities.contracts import (
    CONTROL_TASK_QUEUE,
    REGISTRAR_WORKFLOW_ID,
    SCHEDULER_WORKFLOW_ID,
    WorkerSessionInput,
)
from activities.contracts.worker_rows import batch_of_rows
from activities.proto import cluster_pb2 as pb
from activities.proto.values import binary_payload
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from iris.controller.control_plane import controller_replayer
from iris.deploy.temporal_setup import ensure_search_attributes
from tests.support import workflows_on_dev_server
from tests.test_registration_burst import RegistrationProbe  # stands in for an agent's monitor
from worker_agent.registration import register_hosts
from workflows.fleet.registrar_workflow import RegistrarWorkflow
from workflows.fleet.worker_workflow import WorkerWorkflow
from workflows.messages import RegistrarCarry, RegistrarItem, WorkerLost
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

ACTIVITIES = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
AGENTS, HOSTS = 40, 50


def _batch(agent: int, reply_to: str) -> pb.WorkerBatch:
    hosts = []
    for host in range(HOSTS):
        meta = pb.WorkerMetadata(worker_id=f"a{agent}-h{host}", host="127.0.0.1", agent_session=f"s{agent}")
        meta.capacity.cpu_millis, meta.capacity.memory_bytes = 1000, 2**30
        hosts.append(meta)
    batch, refused = batch_of_rows(hosts, reply_to)
    assert {} == refused
    return batch


async def _answer(probe: WorkflowHandle[Any, Any]) -> dict[str, str]:
    """The agent's answer; a minute at most (`result` follows its long polls for ever: an answer no run sent left
    the test waiting for pytest's 600 s)."""
    answer: dict[str, str] = await asyncio.wait_for(probe.result(), timeout=60)
    return answer


def _signals(events: list, name: str) -> int:  # type: ignore[type-arg]
    return sum(
        1 for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == name
    )  # fmt: skip


async def _failed_to_hand_on(registrar: WorkflowHandle[Any, Any], within: float = 30.0) -> None:
    """Once the registrar's history records a signal to the scheduler that failed (no such workflow)."""
    failed = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED
    deadline = asyncio.get_running_loop().time() + within
    while not any([e.event_type == failed async for e in registrar.fetch_history_events()]):
        assert asyncio.get_running_loop().time() < deadline, "the registrar never tried the absent scheduler"
        await asyncio.sleep(0.1)


async def test_a_storm_of_registrations_reaches_the_scheduler_one_signal_at_a_time() -> None:
    workflows = [SchedulerWorkflow, RegistrarWorkflow, RegistrationProbe]
    async with workflows_on_dev_server("registrar", workflows, ACTIVITIES) as (client, queue):
        scheduler = await client.start_workflow(SchedulerWorkflow.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        registrar = await client.start_workflow(RegistrarWorkflow.run, id=REGISTRAR_WORKFLOW_ID, task_queue=queue)
        probe = RegistrationProbe.run
        probes = [await client.start_workflow(probe, id=f"probe-{n}", task_queue=queue) for n in range(AGENTS)]
        await asyncio.gather(*(
            registrar.signal("register_workers", binary_payload(_batch(agent, probe.id)))
            for agent, probe in enumerate(probes)
        ))  # fmt: skip
        answers = [await _answer(probe) for probe in probes]
        healthy = int(await scheduler.query("healthy_worker_count"))
        at_scheduler = [e async for e in scheduler.fetch_history_events()]
        at_registrar = [e async for e in registrar.fetch_history_events()]
        histories = [await scheduler.fetch_history(), await registrar.fetch_history()]
        await scheduler.terminate("test done")
        await registrar.terminate("test done")

    assert [{}] * AGENTS == answers  # every agent heard back
    assert AGENTS * HOSTS == healthy
    assert 0 == _signals(at_scheduler, "register_workers")
    handed_on = _signals(at_scheduler, "register_worker_batches")
    assert 1 <= handed_on < AGENTS, handed_on  # batches that came together went together
    in_flight, most = 0, 0
    for e in at_registrar:  # each signal to the scheduler is delivered before the next is sent
        if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            in_flight += 1
        elif e.event_type == EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED:
            in_flight -= 1
        most = max(most, in_flight)
    assert 1 == most
    replayer = controller_replayer([SchedulerWorkflow, RegistrarWorkflow])
    for history in histories:
        assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def test_what_waits_for_a_scheduler_is_handed_on_in_order_and_a_carried_run_hands_on_its_own() -> None:
    """Before the scheduler starts, the registrar holds what came; a session's end held behind its registration
    reaches the scheduler after it (its hosts are lost, not left healthy); a run that continued as new hands on
    what its last run carried over, first."""
    workflows = [SchedulerWorkflow, RegistrarWorkflow, RegistrationProbe]
    async with workflows_on_dev_server("registrar-wait", workflows, ACTIVITIES) as (client, queue):
        carried, early, ended = [
            await client.start_workflow(RegistrationProbe.run, id=f"probe-{name}", task_queue=queue)
            for name in ("carried", "early", "ended")
        ]
        batch = base64.b64encode(_batch(0, carried.id).SerializeToString()).decode()
        registrar = await client.start_workflow(
            RegistrarWorkflow.run, RegistrarCarry([RegistrarItem(batch=batch)]), id=REGISTRAR_WORKFLOW_ID,
            task_queue=queue,
        )  # fmt: skip
        await registrar.signal("register_workers", binary_payload(_batch(1, early.id)))
        await registrar.signal("register_workers", binary_payload(_batch(2, ended.id)))
        hosts = [f"a2-h{host}" for host in range(HOSTS)]
        await registrar.signal("worker_lost", WorkerLost(hosts[0], "s2", "the agent stopped", hosts[1:]))
        await _failed_to_hand_on(registrar)  # it tried, found no scheduler, and waits to try again
        scheduler = await client.start_workflow(SchedulerWorkflow.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        answers = [await _answer(probe) for probe in (carried, early, ended)]
        for _ in range(300):  # the loss is handed on after the registrations are answered
            workers = {w.worker_id: w for w in (await scheduler.query("workers")).workers}
            if len(workers) == 3 * HOSTS and not any(workers[h].healthy for h in hosts):
                break
            await asyncio.sleep(0.1)
        history = await registrar.fetch_history()
        await scheduler.terminate("test done")
        await registrar.terminate("test done")
    replayed = await controller_replayer([RegistrarWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None  # a failed hand-on, its retry and a loss in line replay
    assert [{}, {}, {}] == answers
    assert 3 * HOSTS == len(workers)
    assert {f"a{agent}-h{host}" for agent in (0, 1) for host in range(HOSTS)} == {
        w.worker_id for w in workers.values() if w.healthy
    }


async def test_an_agent_whose_registration_the_registrar_holds_for_good_registers_with_the_scheduler() -> None:
    """After a rollback to a controller that does not run the registrar, a registrar run is left that nobody
    serves: the agent's try through it goes unanswered, and its next try goes to the scheduler itself."""
    async with workflows_on_dev_server(
        "registrar-gone", [SchedulerWorkflow, WorkerWorkflow], ACTIVITIES, queue=CONTROL_TASK_QUEUE
    ) as (client, queue):
        assert all(step.outcome != "failed" for step in await ensure_search_attributes(client))
        await client.start_workflow(
            "RegistrarWorkflow", id=REGISTRAR_WORKFLOW_ID, task_queue="nobody-serves-this"
        )
        await client.start_workflow(SchedulerWorkflow.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        session = WorkerSessionInput("gone-0", "s0", announced=True, task_queue=queue)
        meta = pb.WorkerMetadata(worker_id="gone-0", host="127.0.0.1", agent_session="s0")
        meta.capacity.cpu_millis, meta.capacity.memory_bytes = 1000, 2**30
        refused = await register_hosts(client, session, [meta], timeout=60, answer_wait=2.0)
    assert {} == refused


async def test_a_registrar_that_continues_as_new_in_a_storm_loses_nothing() -> None:
    """With Temporal suggesting a new run every 40 events, a storm of registrations spans several registrar runs:
    every agent still hears back and every host is registered."""
    workflows = [SchedulerWorkflow, RegistrarWorkflow, RegistrationProbe]
    suggest = {"limit.historyCount.suggestContinueAsNew": "40"}
    async with workflows_on_dev_server("registrar-can", workflows, ACTIVITIES, dynamic_config=suggest) as (
        client,
        queue,
    ):
        scheduler = await client.start_workflow(SchedulerWorkflow.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        registrar = await client.start_workflow(RegistrarWorkflow.run, id=REGISTRAR_WORKFLOW_ID, task_queue=queue)
        probe = RegistrationProbe.run
        probes = [await client.start_workflow(probe, id=f"probe-{n}", task_queue=queue) for n in range(AGENTS)]
        for agent, waiting in enumerate(probes):  # a few at a time, so that runs end between them
            await registrar.signal("register_workers", binary_payload(_batch(agent, waiting.id)))
        answers = [await _answer(waiting) for waiting in probes]
        healthy = int(await scheduler.query("healthy_worker_count"))
        runs = [r async for r in client.list_workflows(f"WorkflowId = '{REGISTRAR_WORKFLOW_ID}'")]
        await scheduler.terminate("test done")
        await client.get_workflow_handle(REGISTRAR_WORKFLOW_ID).terminate("test done")
    assert [{}] * AGENTS == answers
    assert AGENTS * HOSTS == healthy
    assert len(runs) > 1, "the registrar continued as new"
