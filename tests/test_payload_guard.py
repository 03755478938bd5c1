"""No poison pills: signals the scheduler cannot read are dropped and recorded, and scheduling goes on.

The real SchedulerWorkflow runs on a dev server behind the controller's guard (its runner and
interceptor) and a client holding the deployment's key; bad signals come from a client with
another key, a client with no key, and by hand (garbage, an older dataclass).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import structlog
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from activities.contracts import SCHEDULER_WORKFLOW_ID, WorkerSessionInput
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from iris.controller.control_plane import workflow_runner
from iris.controller.observability import REGISTRY
from iris.controller.payload_guard import GuardedRunner, PayloadGuard
from iris.deploy.worker_versioning import deployment_config, promote
from iris.security.codec import EncryptionCodec, data_converter, generate_key, load_key
from iris.security.key_check import check_cluster_key
from tests.support import TEMPORAL, TEST_BUILD, WAL_ARGS
from tests.test_release_batch import _running, _until, announced_to_tasks_that_exist, tasks_that_exist
from tests.test_scheduler_determinism import SPEC_FITS, _batch
from worker_agent.encryption import KeyMismatchError
from workflows.fleet.autoscaler_state import AutoscalerConfig, AutoscalerStatus
from workflows.fleet.autoscaler_workflow import AutoscalerWorkflow
from workflows.fleet.worker_workflow import WorkerWorkflow
from workflows.messages import Enqueue, RegistrationReply
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

KEY, OTHER_KEY = (load_key({"IRIS_CODEC_KEY": generate_key()}) for _ in range(2))


@dataclasses.dataclass
class OldRelease:
    """`Release` as an older sender knew it: no attempt."""

    job_id: str
    task_index: int


@dataclasses.dataclass
class NewerRelease:
    """`Release` as a newer sender knows it: a field this scheduler has never heard of."""

    job_id: str
    task_index: int
    attempt: int
    reason: str = "newer"


@contextlib.asynccontextmanager
async def _clients(
    workflows: Sequence[type] = (SchedulerWorkflow,),
) -> AsyncIterator[tuple[Client, Client, Client, str]]:
    """A dev server; a worker guarded as the controller's is, holding KEY; clients with KEY, OTHER_KEY and none."""
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(TEMPORAL), dev_server_extra_args=WAL_ARGS)
    address = env.client.service_client.config.target_host
    queue = f"guard-{uuid.uuid4().hex[:8]}"
    try:
        keyed = await Client.connect(address, data_converter=data_converter(KEY))
        other = await Client.connect(address, data_converter=data_converter(OTHER_KEY))
        plain = await Client.connect(address)  # the SDK's own converter: what any script would use
        activities: list[Callable[..., Any]] = [
            find_assignments_activity, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler,
            known_slices,
        ]
        with concurrent.futures.ThreadPoolExecutor(4) as executor:
            async with Worker(
                keyed, task_queue=queue, workflows=list(workflows), activities=activities,
                activity_executor=executor, workflow_runner=GuardedRunner(workflow_runner()),
                interceptors=[PayloadGuard()], deployment_config=deployment_config(TEST_BUILD),
            ):  # fmt: skip
                await promote(keyed, TEST_BUILD)
                yield keyed, other, plain, queue
    finally:
        await env.shutdown()


@activity.defn(name="known_slices")
async def known_slices() -> list[object]:
    """No slices: the autoscaler here starts empty and is never configured with scale groups."""
    return []


def _dropped(signal: str) -> float:
    return _dropped_in("SchedulerWorkflow", signal)


async def test_unreadable_signals_are_dropped_and_recorded_and_scheduling_goes_on() -> None:
    """Another key, no key, garbage, a missing field: each signal is dropped with a log line and a count;
    a newer sender's extra field is accepted; no workflow task fails; the next job is placed."""
    before = {name: _dropped(name) for name in ("register_workers", "enqueue", "release", "enqueue_batch")}
    with structlog.testing.capture_logs() as logs:
        async with _clients() as (keyed, other, plain, queue):
            handle = await keyed.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
            await handle.signal("register_workers", _batch(0, 1, 0))
            await handle.signal("enqueue", Enqueue("first", SPEC_FITS, {0: 0}))
            assert ["first/task-0"] == await _until(keyed, queue, ["first/task-0"])

            await other.get_workflow_handle(queue).signal("register_workers", _batch(1, 1, 0))  # another key
            await other.get_workflow_handle(queue).signal("enqueue", Enqueue("other-key", SPEC_FITS, {0: 0}))
            await plain.get_workflow_handle(queue).signal("enqueue", "not an enqueue")  # garbage, by hand
            not_json = RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{no"))
            await plain.get_workflow_handle(queue).signal("enqueue_batch", not_json)
            await plain.get_workflow_handle(queue).signal("release", OldRelease("first", 0))  # missing a field
            await plain.get_workflow_handle(queue).signal("release", NewerRelease("first", 0, 0))  # extra field
            await handle.signal("enqueue", Enqueue("second", SPEC_FITS, {0: 0}))

            # The newer release freed task 0's place; "second" took it; nothing else got in.
            assert ["second/task-0"] == await _until(keyed, queue, ["second/task-0"])
            assert "" == await handle.query("pending_reason", "other-key")
            workers = await handle.query("workers")
            assert ["a0-h0"] == [w.worker_id for w in workers.workers]
            history = await handle.fetch_history()
            failed = [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
            await handle.terminate("test done")
            assert [] == failed
            replayer = Replayer(workflows=[SchedulerWorkflow], interceptors=[PayloadGuard()],
                                data_converter=data_converter(KEY))  # fmt: skip
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert replayed.replay_failure is None  # the drops replay as they happened

    drops = [entry for entry in logs if entry["event"] == "payload_dropped"]
    assert sorted(["register_workers", "enqueue", "enqueue", "enqueue_batch", "release"]) == sorted(
        d["signal"] for d in drops
    )
    by_signal = {(d["signal"], d["reason"]) for d in drops}
    other_id, key_id = data_converter(OTHER_KEY).payload_codec.key_id, data_converter(KEY).payload_codec.key_id  # type: ignore[union-attr]
    expected_key_error = f"payload encrypted with key {other_id}, but this process holds key {key_id}"
    assert ("register_workers", expected_key_error) in by_signal
    assert ("enqueue", expected_key_error) in by_signal
    assert any(s == "release" and "attempt" in r for s, r in by_signal)  # names the missing field
    assert all("\n" not in d["reason"] and d["workflow_id"] for d in drops)
    assert {"register_workers": 1, "enqueue": 2, "release": 1, "enqueue_batch": 1} == {
        name: int(_dropped(name) - before[name]) for name in before
    }


@pytest.mark.parametrize("held", [None, "other"])
async def test_a_client_that_cannot_decrypt_an_answer_gets_one_line_naming_the_keys(held: str | None) -> None:
    """A query answered under the deployment's key, read with another key or none: UnreadablePayload names both."""
    async with _clients() as (keyed, other, plain, queue):
        handle = await keyed.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await handle.signal("register_workers", _batch(0, 1, 0))
        assert [] == await _running(keyed, queue)
        reader = other if held else plain
        if held is None:  # a keyless Iris process: Iris's converter without a codec
            reader = await Client.connect(plain.service_client.config.target_host, data_converter=data_converter(None))
        key_id = data_converter(KEY).payload_codec.key_id  # type: ignore[union-attr]
        with pytest.raises(ValueError) as caught:
            await reader.get_workflow_handle(queue).query("healthy_worker_count")
        await handle.terminate("test done")
        message = str(caught.value)
        assert message.startswith(f"payload encrypted with key {key_id}, but this process holds ")
        assert ("no key" in message) == (held is None)


async def test_the_pre_flight_check_names_the_keys_before_anything_is_sent() -> None:
    """Against a scheduler started under the key: the key holder passes; another key or none is refused."""
    async with _clients() as (keyed, other, plain, queue):
        await check_cluster_key(keyed)  # no scheduler yet: nothing tells, the check passes
        handle = await keyed.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        await handle.signal("configure", "file:///store")  # as a controller starting up does
        await plain.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal("configure", "x")  # a stray signal: no evidence
        await check_cluster_key(keyed)
        key_id, other_id = (EncryptionCodec(k).key_id for k in (KEY, OTHER_KEY))  # type: ignore[arg-type]
        with pytest.raises(KeyMismatchError) as caught:
            await check_cluster_key(other)
        assert f"the cluster's payloads are encrypted with key {key_id}, but this process holds key {other_id}" == str(
            caught.value
        )
        keyless = await Client.connect(plain.service_client.config.target_host, data_converter=data_converter(None))
        with pytest.raises(KeyMismatchError, match="this process holds no key"):
            await check_cluster_key(keyless)
        await handle.terminate("test done")


async def test_the_autoscaler_and_a_worker_session_drop_what_they_cannot_read() -> None:
    """The other long-lived workflows are guarded alike: wrong-key and malformed signals are dropped and counted,
    no workflow task fails, and each still answers."""
    before = {name: _dropped_in(t, name) for t, name in DROPS}
    async with _clients([AutoscalerWorkflow, WorkerWorkflow]) as (keyed, other, plain, queue):
        autoscaler = await keyed.start_workflow(AutoscalerWorkflow.run, None, id=f"{queue}-as", task_queue=queue)
        session = WorkerSessionInput("w1", "s1", task_queue=f"{queue}-nobody")  # its activity waits, unpolled
        monitor = await keyed.start_workflow(WorkerWorkflow.run, session, id=f"{queue}-w", task_queue=queue)
        await other.get_workflow_handle(f"{queue}-as").signal("configure", AutoscalerConfig())
        await plain.get_workflow_handle(f"{queue}-as").signal("slice_state", {"slice_id": "s"})  # missing fields
        await other.get_workflow_handle(f"{queue}-w").signal("registered", RegistrationReply())
        await plain.get_workflow_handle(f"{queue}-w").signal("registered", [1, 2])
        assert {} == (await autoscaler.query("status", result_type=AutoscalerStatus)).unmet  # it answers
        for _ in range(100):
            if all(_dropped_in(t, name) - before[name] >= 1 for t, name in DROPS):
                break
            await asyncio.sleep(0.1)
        failed = [
            (handle.id, e.event_id)
            for handle in (autoscaler, monitor)
            async for e in handle.fetch_history_events()
            if e.HasField("workflow_task_failed_event_attributes")
        ]
        for handle in (autoscaler, monitor):
            await handle.terminate("test done")
    assert [] == failed
    assert {"configure": 1, "slice_state": 1, "registered": 2} == {
        name: int(_dropped_in(t, name) - before[name]) for t, name in DROPS
    }


DROPS = [("AutoscalerWorkflow", "configure"), ("AutoscalerWorkflow", "slice_state"), ("WorkerWorkflow", "registered")]


def _dropped_in(workflow_type: str, signal: str) -> float:
    """`iris_dropped_payloads_total` as the controller's /metrics shows it."""
    labels = {"workflow_type": workflow_type, "signal": signal}
    return REGISTRY.get_sample_value("iris_dropped_payloads_total", labels) or 0.0
