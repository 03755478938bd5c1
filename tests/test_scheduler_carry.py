"""The scheduler's carried state: packed and loaded whole, in one workflow task, nothing of it lost."""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from dataclasses import replace

import pytest
import zstandard
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from activities.contracts import REGISTERED, SCHEDULER_NOT_WHOLE, Delivery, Release
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from tests.support import workflows_on_dev_server
from tests.test_registration_burst import RegistrationProbe
from tests.test_release_batch import announced_to_tasks_that_exist, tasks_that_exist
from tests.test_scheduler_determinism import SPEC_FITS
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import CordonWorkers, Enqueue, RegistrationReply
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_carry import STREAMS, counts, pack, unpack
from workflows.scheduler.scheduler_core import SchedulerCore
from workflows.scheduler.scheduler_phase import SchedulerEvent, SchedulerPhase
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

WORKERS = 40  # 1,000 millicpu each: 10 of SPEC_FITS' tasks
PLACED = 300  # on the first 30 workers; the last 10 are free


def _state() -> SchedulerState:
    state = SchedulerState(store_url="memory://carry")
    for i in range(WORKERS):
        state.workers[f"w{i:02d}"] = WorkerEntry(f"w{i:02d}", "s", 1000, 1 << 30, 0, 0, {"zone": f"z{i % 2}"})
    for i in range(PLACED):
        state.placements[f"run/task-{i}"] = Placement("run", i, 0, f"w{i // 10:02d}", 100, 2**20, 0, 0,
                                                      user="ana", band="interactive", placed_at=5.0)  # fmt: skip
    state.pending["queued"] = PendingEntry("queued", SPEC_FITS, dict.fromkeys(range(20), 0), 7.0)
    state.pending_reasons["queued"] = "waiting"
    return state


def test_a_state_comes_back_whole_in_its_order() -> None:
    """Workers in their order with everything the registry keeps, the queue in its FIFO order with its
    reasons (one of a job no longer queued too), placements with their ports, and the header's parts."""
    state = _state()
    state.workers["w00"].cordoned = True
    state.workers["w01"].state, state.workers["w01"].lost_at = WorkerState.LOST, 30.0
    state.workers["w02"].state, state.workers["w02"].suspect_until = WorkerState.QUARANTINED, 44.5
    state.workers["w02"].dispatch_failures = 2
    moved = state.workers.pop("w10")  # registered again: last in the registry
    state.workers["w10"] = moved
    state.workers["odd"] = WorkerEntry("odd", "s9", 2000, 1 << 31, 1, 4, {"b": True, "i": 3, "f": 0.5, "s": "x"},
                                       runtime="docker", host="h", address="10.0.0.9", port_range=(30000, 30099),
                                       heartbeat_timeout_seconds=6.0)  # fmt: skip
    state.pending["big"] = PendingEntry("big", SPEC_FITS, {i: 1 for i in range(2000)}, 8.0, room_at=9.5)
    state.pending["other"] = PendingEntry("other", replace(SPEC_FITS, user="bo", band="batch"), {7: 2}, 3.0)
    state.pending_reasons["gone"] = "a reason the next pass drops"
    state.placements["web/task-0"] = Placement("web", 0, 1, "w39", 100, 2**20, 0, 0, {"http": 20001}, "ana")
    state.ported.add("web/task-0")
    state.port_cursors["10.0.0.9"] = 30003
    again = unpack(pack(state))
    assert state == again
    assert list(state.workers) == list(again.workers) and list(state.pending) == list(again.pending)
    assert {"b": True, "i": 3, "f": 0.5, "s": "x"} == again.workers["odd"].attributes
    assert (30000, 30099) == again.workers["odd"].port_range
    assert {"http": 20001} == again.placements["web/task-0"].ports and {"web/task-0"} == again.ported
    assert [WORKERS, WORKERS + 1, 20 + 2000 + 1, PLACED + 1] == counts(again)


def test_a_spec_shared_by_queued_jobs_is_carried_once() -> None:
    """A job array's entries share one spec: the carry writes it once and the next run's entries share it again."""
    state = _state()
    for n in range(200):
        state.pending[f"array-{n}"] = PendingEntry(f"array-{n}", SPEC_FITS, {0: 0}, 10.0 + n)
    state.pending["copy"] = PendingEntry("copy", replace(SPEC_FITS), {0: 0}, 500.0)  # equal, another object
    queue = pb.QueueRows.FromString(compressed.decompress(_stream(pack(state), 3)))
    assert 1 == len(queue.specs) and 202 == len(queue.job_ids)
    again = unpack(pack(state))
    assert 1 == len({id(e.spec) for e in again.pending.values()})
    assert SPEC_FITS == again.pending["array-7"].spec


def _stream(data: bytes, n: int) -> bytes:
    """The carry from its n-th frame on (0: the header), still compressed."""
    for _ in range(n):
        z = zstandard.ZstdDecompressor().decompressobj()
        z.decompress(data)
        data = z.unused_data
    return data


def test_a_carry_an_earlier_build_wrote_in_zlib_still_loads() -> None:
    """A scheduler continues as new onto a new build with the old build's carry: zlib frames read as well."""
    state = _state()
    data = pack(state)
    parts = compressed.split(data, STREAMS, "carry")
    assert data.startswith(compressed.ZSTD_MAGIC) and len(b"".join(parts)) > len(data)
    old = b"".join(zlib.compress(part, 1) for part in parts)
    assert pack(unpack(old)) == data


def test_a_carry_that_does_not_read_is_refused_naming_it() -> None:
    data = pack(_state())
    header = json.loads(compressed.decompress(data))
    header["port_cursors"] = "twelve"
    bad_header = compressed.compress(json.dumps(header).encode()) + _stream(data, 1)
    with pytest.raises(ValueError, match="header does not read as a CarryHeader"):
        unpack(bad_header)
    with pytest.raises(ValueError, match="cut short in its queue"):
        unpack(data[: len(data) - 10])
    head_and_placements = data[: len(data) - len(_stream(data, 2))]
    with pytest.raises(ValueError, match="cut short in its workers"):
        unpack(head_and_placements)
    broken = compressed.compress(b"\xff\xff\xff")
    with pytest.raises(ValueError, match="workers or queue do not parse"):
        unpack(head_and_placements + broken + _stream(data, 3))


def test_a_carried_queue_that_names_a_spec_it_does_not_hold_is_refused() -> None:
    """A job pointing past the queue's specs is a carry this build cannot load: said as such, not an IndexError."""
    state = _state()
    data = pack(state)
    queue = pb.QueueRows.FromString(compressed.decompress(_stream(data, 3)))
    assert len(state.pending) == len(queue.job_ids) > 0
    queue.spec[-1] = len(queue.specs)
    with pytest.raises(ValueError, match=r"names specs it does not hold \(1 held\)"):
        unpack(data[: len(data) - len(_stream(data, 3))] + compressed.compress(queue.SerializeToString()))


@pytest.mark.parametrize("seed", range(12))
def test_any_state_a_run_reaches_is_carried_whole(seed: int) -> None:
    """Random releases, placements, replacements, enqueues, reasons and registrations: after each, what the
    next run loads is the state as it was."""
    rng = random.Random(seed)
    state = _state()
    for n in range(60):
        key = f"run/task-{rng.randrange(PLACED + 20)}"
        match rng.randrange(7):
            case 0:
                state.placements.pop(key, None)
            case 1:
                index, worker = int(key.rsplit("-", 1)[1]), f"w{rng.randrange(45):02d}"
                user = rng.choice(["ana", "bo"])
                state.placements[key] = Placement("run", index, rng.randrange(3), worker, 100, 2**20, 0, 0, user=user)
            case 2:
                job = f"j{rng.randrange(6)}"
                state.pending.pop(job, None)
                state.pending[job] = PendingEntry(job, SPEC_FITS, dict.fromkeys(range(rng.randrange(1, 30)), n), n)
            case 3:
                waiting = [e for e in state.pending.values() if e.attempts]
                if waiting:
                    entry = rng.choice(waiting)
                    entry.attempts.pop(next(iter(entry.attempts)))
            case 4:
                state.pending_reasons[rng.choice(["queued", "j1", "j2", "gone"])] = f"reason {n}"
            case 5:
                state.pending_reasons.pop(rng.choice(["queued", "j1", "j2", "gone"]), None)
            case _:
                worker = f"w{rng.randrange(45):02d}"
                state.workers[worker] = WorkerEntry(worker, f"s{n}", 1000, 1 << 30, 0, 0, {"zone": "z3"})
        if n % 10 == 9:
            state = unpack(pack(state))
            again = unpack(pack(state))
            assert state == again and list(state.pending) == list(again.pending)


async def _running(handle: WorkflowHandle[object, None]) -> set[str]:
    workers = await handle.query("workers", result_type=pb.WorkerList)
    return {key for w in workers.workers for key in w.running_tasks}


async def _eventually(check: object, seconds: float = 30.0) -> None:
    for _ in range(int(seconds * 10)):
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError("not reached in time")


async def test_a_carried_state_serves_from_the_runs_first_task(client_and_queue: tuple[Client, str]) -> None:
    """A run handed a state loads it whole in its first workflow task: signals that come with that task land
    on it, every query is answered whole at once (counts, workers with their placements, the autoscaler's
    snapshot), and no no-op activity ends a task while it loads."""
    client, queue = client_and_queue
    bare = Client(client.service_client, namespace=client.namespace)  # no QueryRetry: a refusal would show
    handle = await client.start_workflow(SchedulerWorkflow.run, args=[pack(_state())], id=queue, task_queue=queue)
    await handle.signal("enqueue", Enqueue("late", SPEC_FITS, {0: 0, 1: 0}))
    await handle.signal("release", Release("run", 0, 0))
    await handle.signal("cordon_workers", CordonWorkers(["w39"], True, "drain"))
    meta = pb.WorkerMetadata(worker_id="w40", agent_session="s2")
    meta.capacity.cpu_millis, meta.capacity.memory_bytes = 1000, 1 << 30
    await handle.signal("register_workers", pb.WorkerBatch(workers=[meta]))

    seen = bare.get_workflow_handle(queue)
    summary = await seen.query("summary", result_type=pb.ClusterSummary)
    assert WORKERS <= summary.total_workers
    whole = await seen.query("workers", result_type=pb.WorkerList)
    assert {f"run/task-{i}" for i in range(1, PLACED)} <= {key for w in whole.workers for key in w.running_tasks}
    assert await seen.query("autoscale_snapshot", result_type=bytes)

    expected = {f"run/task-{i}" for i in range(1, PLACED)} | {f"queued/task-{i}" for i in range(20)}
    expected |= {"late/task-0", "late/task-1"}

    async def all_placed() -> bool:
        return await _running(handle) == expected

    await _eventually(all_placed)
    workers = {w.worker_id: w for w in (await handle.query("workers", result_type=pb.WorkerList)).workers}
    assert workers["w39"].cordoned and not workers["w39"].running_tasks and "w40" in workers
    events = [e async for e in handle.fetch_history_events()]
    kinds = {e.activity_task_scheduled_event_attributes.activity_type.name for e in events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}  # fmt: skip
    assert kinds <= {"find_assignments", "deliver_signals", "deliver_assignments", "rebuild_scheduler"}  # no pause


async def test_answers_a_run_still_owed_are_sent_by_the_next() -> None:
    """A closing run answers registrations in its first round only; one that came in while those answers were out
    is carried with the state, and the next run answers it first. (No run answered it: its agent waited, and a
    registrar test that spans continue-as-new waited for pytest's timeout.)"""
    workflows, activities = [SchedulerWorkflow, RegistrationProbe], [deliver_signals, find_assignments_activity,
                                                                      deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("owed-answers", workflows, activities) as (client, queue):
        probe = await client.start_workflow(RegistrationProbe.run, id=f"{queue}-agent", task_queue=queue)
        state = _state()
        state.replies = [Delivery(probe.id, REGISTERED, RegistrationReply({"w99": "a refusal, to tell it apart"}))]
        handle = await client.start_workflow(SchedulerWorkflow.run, args=[pack(state)], id=queue, task_queue=queue)
        assert {"w99": "a refusal, to tell it apart"} == await asyncio.wait_for(probe.result(), timeout=60)
        await handle.terminate("test done")


@pytest.fixture
async def client_and_queue() -> object:
    activities = [find_assignments_activity, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler]
    async with workflows_on_dev_server("sched-carry", [SchedulerWorkflow], activities) as pair:
        yield pair


def test_a_run_that_handed_its_state_over_answers_its_counts_and_refuses_the_rest() -> None:
    """A query that reaches a run after it continued as new is not answered by unpacking the whole state in
    that one activation (~0.4 s at 10,000 workers, near the SDK's deadlock detector on a busy controller):
    the counts handed over answer `summary`; anything else is refused, and an Iris client asks the next run."""
    core = SchedulerCore(pack(_state()), signal_budget=1_000)
    assert SchedulerPhase.SERVING == core.phase  # a carried state loads at once
    assert WORKERS == len(core.whole().workers)
    core.move(SchedulerEvent.RUN_SHOULD_END)
    core.let_go(counts(core.state))
    assert (WORKERS, 20, PLACED) == (core.handed_over.total_workers, core.handed_over.pending_tasks,
                                     core.handed_over.running_tasks)  # type: ignore[union-attr]  # fmt: skip
    for read in (core.whole, lambda: core.state):
        with pytest.raises(RuntimeError, match=f"^{SCHEDULER_NOT_WHOLE}: this run handed it to the next"):
            read()
