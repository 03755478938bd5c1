"""The scheduler's carried state loads in steps, and nothing sent to the scheduler meanwhile is lost."""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError

from activities.contracts import SCHEDULER_NOT_WHOLE, Release
from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity, scheduler_pause
from tests.support import workflows_on_dev_server
from tests.test_release_batch import announced_to_tasks_that_exist, tasks_that_exist
from tests.test_scheduler_determinism import SPEC_FITS
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import CordonWorkers, Enqueue
from workflows.scheduler import scheduler_carry_loader
from workflows.scheduler.placement_index import Placement, Placements
from workflows.scheduler.scheduler_carry import Packer, pack
from workflows.scheduler.scheduler_carry_loader import StateLoader, unpack
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


def _streams(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], bytes]:
    """The carry's header (its first stream), its chunk lines (the third) and its placements (the second)."""
    first = zlib.decompressobj()
    header = json.loads(first.decompress(data))
    assert first.eof and first.unused_data, "three zlib streams: the header, the placements, then the chunks"
    second = zlib.decompressobj()
    placed = second.decompress(first.unused_data)
    assert second.eof and second.unused_data
    return header, [json.loads(line) for line in zlib.decompress(second.unused_data).splitlines()], placed


def _carry(header: dict[str, Any], chunks: list[dict[str, Any]], placed: bytes) -> bytes:
    """A carry laid out as `pack` lays it out, from edited messages."""
    head = zlib.compress(json.dumps(header).encode() + b"\n")
    lines = zlib.compress(b"".join(json.dumps(chunk).encode() + b"\n" for chunk in chunks))
    return head + zlib.compress(placed) + lines


def test_a_state_loads_in_steps_and_comes_back_whole() -> None:
    """Small chunks: many steps, workers first, then the queue in its order with its reasons; the header's
    counts and the placements (messages: parsed in milliseconds) at once."""
    state = _state()
    state.pending["big"] = PendingEntry("big", SPEC_FITS, {i: 1 for i in range(200)}, 8.0)  # split over rows
    loader = StateLoader(pack(state, step=4, chunk=4))
    assert [WORKERS, WORKERS, 220, PLACED] == loader.counts
    assert state.placements == loader.state.placements
    loader.step()
    assert 0 < len(loader.state.workers) < WORKERS
    while not loader.state.pending:
        loader.step()
    assert "waiting" == loader.state.pending_reasons["queued"]  # with its job
    while not loader.step():
        pass
    assert loader.steps > 40  # workers and the queue, 4 units a step
    assert state == loader.state
    assert ["queued", "big"] == list(loader.state.pending)
    assert unpack(pack(state)) == loader.state


def test_what_changes_while_the_state_is_packed_is_carried_too() -> None:
    """The run packs in steps while signals change the state: the packing is the state when it finished."""
    state = _state()
    state.pending["other"] = PendingEntry("other", SPEC_FITS, {0: 0, 1: 0}, 8.0)
    state.pending["third"] = PendingEntry("third", SPEC_FITS, {0: 0}, 9.0)
    packer = Packer(state, step=4, chunk=4)
    packer.step()
    packer.step()
    del state.placements["run/task-0"]  # released
    state.placements["run/task-1"] = Placement("run", 1, 1, "w39", 100, 2**20, 0, 0, {"http": 20001}, "ana")  # again
    state.ported.add("run/task-1")
    state.placements["late/task-0"] = Placement("late", 0, 0, "w-gone", 100, 2**20, 0, 0)  # a worker not listed
    del state.pending["queued"].attempts[3]  # placed meanwhile
    del state.pending["other"]  # killed
    state.pending["other"] = PendingEntry("other", SPEC_FITS, {5: 1}, 10.0)  # and enqueued again: last in the queue
    state.pending["new"] = PendingEntry("new", SPEC_FITS, {0: 0}, 11.0)
    again = unpack(packer.finish(state))
    assert state == again
    assert ["queued", "third", "other", "new"] == list(again.pending)
    assert {"http": 20001} == again.placements["run/task-1"].ports


@pytest.mark.parametrize("steps", [1, 6, 10_000])  # changes while the workers are packed, after, at the end
def test_workers_changed_added_and_removed_while_the_state_is_packed_are_carried_too(steps: int) -> None:
    """Workers are packed first, a few per step; what registration and liveness change meanwhile is carried:
    the packing is the registry as it was when the run finished, in its order."""
    state = _state()
    packer = Packer(state, step=8, chunk=8)
    for _ in range(steps):
        if packer.step():
            break
    state.workers["w00"].cordoned = True  # an operator's cordon
    state.workers["w01"].state = WorkerState.LOST  # its agent stopped heartbeating
    state.workers["w01"].lost_at = 30.0
    state.workers["w02"] = WorkerEntry("w02", "s2", 2000, 1 << 30, 0, 0, {"zone": "z9"})  # its agent restarted
    state.workers["w03"] = WorkerEntry("w03", "s", 1000, 1 << 30, 0, 0, {"zone": "z1"})  # the same, made again
    del state.workers["w38"]  # removed
    state.workers["w99"] = WorkerEntry("w99", "s", 1000, 1 << 30, 0, 0, {"zone": "z0"}, host="h99")  # new
    moved = state.workers.pop("w10")  # removed and registered again: last in the registry now
    state.workers["w10"] = moved
    loader = StateLoader(packer.finish(state))
    assert [len(state.workers) - 1, len(state.workers), 20, PLACED] == loader.counts
    while not loader.step():
        pass
    assert state == loader.state
    assert list(state.workers) == list(loader.state.workers)
    assert WorkerState.LOST == loader.state.workers["w01"].state and "w38" not in loader.state.workers


def test_a_registry_changed_after_it_was_packed_keeps_its_order_without_a_list_of_it() -> None:
    """Changed and new workers only: the last line names them, not the whole registry's order."""
    state = _state()
    packer = Packer(state)
    while not packer.step():
        pass
    state.workers["w05"].dispatch_failures = 2
    state.workers["w-new"] = WorkerEntry("w-new", "s", 1000, 1 << 30, 0, 0, {})
    header, chunks, placed = _streams(packer.finish(state))
    changes = chunks[-1]
    assert changes["changes"]
    named = [w["worker_id"] for w in changes["workers"]]
    assert ([], ["w05", "w-new"], []) == (changes["workers_gone"], named, changes["worker_order"])
    assert state == unpack(_carry(header, chunks, placed))


def test_a_carry_from_a_build_with_fewer_or_more_fields_loads() -> None:
    """The carry's schema is its messages: a field a build before did not write reads as its default, and
    one a later build added is ignored (no version number, no positional rows)."""
    state = _state()
    state.pending["queued"].spec.max_concurrent = 0  # as a build before throttled arrays wrote it
    header, chunks, placed = _streams(pack(state, step=8, chunk=8))
    for chunk in chunks:
        for entry in chunk.get("queued", []):
            del entry["spec"]["max_concurrent"]
        chunk.pop("worker_order")
        chunk["from_a_later_build"] = [1, 2]
    del header["port_cursors"], header["reservations"]
    loader = StateLoader(_carry(header, chunks, placed))
    assert [WORKERS, WORKERS, 20, PLACED] == loader.counts
    while not loader.step():
        pass
    assert state == loader.state


@pytest.mark.parametrize("read", [1, 7, 64, 4096])
def test_lines_split_across_decompressed_pieces_load_whole(read: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step decompresses `READ` bytes at a time: a line cut between two pieces is joined again."""
    monkeypatch.setattr(scheduler_carry_loader, "READ", read)
    state = _state()
    state.pending["big"] = PendingEntry("big", SPEC_FITS, {i: 1 for i in range(200)}, 8.0)
    assert state == unpack(pack(state, step=8, chunk=8))


def test_a_carry_that_placed_its_placements_in_rows_is_refused_naming_why() -> None:
    """A build before carried placements as JSON rows among the chunks: its carry says so, not a parse error."""
    header, chunks, _ = _streams(pack(_state(), step=8, chunk=8))
    del header["placements_stream"]
    rows = zlib.compress(json.dumps(header).encode() + b"\n") + zlib.compress(
        b"".join(json.dumps(chunk).encode() + b"\n" for chunk in chunks)
    )
    with pytest.raises(ValueError, match="carried placements as JSON rows"):
        StateLoader(rows)


def test_a_build_before_refuses_this_carry_rather_than_load_its_header_alone() -> None:
    """A build before read one zlib stream and took its last line as the header: with this layout that line
    is empty, so an older controller made current again fails the run's first task instead of starting empty."""
    lines = zlib.decompress(pack(_state())).split(b"\n")  # what a build before read: the first stream alone
    assert b"" == lines[-1] and 1 == len([line for line in lines if line])


def test_a_carry_that_does_not_read_is_refused_naming_it() -> None:
    header, chunks, placed = _streams(pack(_state()))
    header["step"] = "twelve"
    with pytest.raises(ValueError, match="CarryHeader: expected int, got str"):
        StateLoader(_carry(header, chunks, placed))
    data = pack(_state())
    with pytest.raises(ValueError, match="cut short"):
        unpack(data[: len(data) - 40])
    header["step"] = 12
    with pytest.raises(ValueError, match="carried placements do not parse"):
        unpack(_carry(header, chunks, placed[: len(placed) // 2]))


@pytest.mark.parametrize("seed", range(12))
def test_any_changes_while_the_state_is_packed_are_carried(seed: int) -> None:
    """Random releases, placements, replacements, enqueues, reasons and registrations between packing steps:
    what loads is the state as the run finished, whatever was packed before it changed."""
    rng = random.Random(seed)
    state = _state()
    packer = Packer(state, step=rng.choice([3, 8, 40]), chunk=rng.choice([2, 4, 16]))
    done = False
    for n in range(60):
        done = done or packer.step()
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
                if state.pending:
                    entry = rng.choice(list(state.pending.values()))
                    entry.attempts.pop(next(iter(entry.attempts)), None)
            case 4:
                state.pending_reasons[rng.choice(["queued", "j1", "j2", "gone"])] = f"reason {n}"
            case 5:
                state.pending_reasons.pop(rng.choice(["queued", "j1", "j2", "gone"]), None)
            case _:
                worker = f"w{rng.randrange(45):02d}"
                state.workers[worker] = WorkerEntry(worker, f"s{n}", 1000, 1 << 30, 0, 0, {"zone": "z3"})
    assert state == unpack(packer.finish(state))


async def _running(handle: WorkflowHandle[object, None]) -> set[str]:
    workers = await handle.query("workers", result_type=pb.WorkerList)
    return {key for w in workers.workers for key in w.running_tasks}


async def _eventually(check: object, seconds: float = 30.0) -> None:
    for _ in range(int(seconds * 10)):
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError("not reached in time")


async def test_signals_and_queries_while_the_state_loads(client_and_queue: tuple[Client, str]) -> None:
    """Signals sent while the run loads its state are held and applied after. Meanwhile the counts are answered
    as the previous run left them, and a query for the whole state is refused rather than answered in part
    (workers came in first, placements last: a worker listed then ran nothing); an Iris client asks again."""
    client, queue = client_and_queue
    bare = Client(client.service_client, namespace=client.namespace)  # no QueryRetry: sees each refusal
    handle = await client.start_workflow(
        SchedulerWorkflow.run, args=[pack(_state(), step=2, chunk=2)], id=queue, task_queue=queue
    )
    seen = bare.get_workflow_handle(queue)
    for _ in range(50):  # a query before the run's first workflow task may be refused
        try:
            summary = await seen.query("summary", result_type=pb.ClusterSummary)
            break
        except WorkflowQueryFailedError:
            await asyncio.sleep(0.1)
    # The previous run's counts, answered while only part of the state is in.
    assert (WORKERS, WORKERS, 20, PLACED) == (
        summary.healthy_workers, summary.total_workers, summary.pending_tasks, summary.running_tasks
    )
    for query, result_type in [("workers", pb.WorkerList), ("autoscale_snapshot", bytes),
                               ("dashboard_worker", pb.WorkerStatus)]:  # fmt: skip
        args = ["w00"] if query == "dashboard_worker" else []
        with pytest.raises(WorkflowQueryFailedError, match="not whole: it is loading"):
            await seen.query(query, *args, result_type=result_type)

    await handle.signal("enqueue", Enqueue("late", SPEC_FITS, {0: 0, 1: 0}))
    await handle.signal("release", Release("run", 0, 0))
    await handle.signal("cordon_workers", CordonWorkers(["w39"], True, "drain"))
    meta = pb.WorkerMetadata(worker_id="w40", agent_session="s2")
    meta.capacity.cpu_millis, meta.capacity.memory_bytes = 1000, 1 << 30
    await handle.signal("register_workers", pb.WorkerBatch(workers=[meta]))  # admitted once the state is whole

    # An Iris client's query, asked while the run still loads, waits for the whole state: every carried
    # placement is listed with its worker (none was, on a worker loaded before its placements).
    whole = await handle.query("workers", result_type=pb.WorkerList)
    assert WORKERS <= len(whole.workers)
    assert {f"run/task-{i}" for i in range(1, PLACED)} <= {key for w in whole.workers for key in w.running_tasks}

    expected = {f"run/task-{i}" for i in range(1, PLACED)} | {f"queued/task-{i}" for i in range(20)}
    expected |= {"late/task-0", "late/task-1"}

    async def all_placed() -> bool:
        return await _running(handle) == expected

    await _eventually(all_placed)
    workers = {w.worker_id: w for w in (await handle.query("workers", result_type=pb.WorkerList)).workers}
    assert workers["w39"].cordoned and not workers["w39"].running_tasks and "w40" in workers

    # The four signals (the registration too) were delivered while the run was still loading: before the
    # pause ahead of its last loading step (the first pass comes after one more pause; the passes'
    # activities come later).
    events = [e async for e in handle.fetch_history_events()]
    scheduled = {
        e.event_id for e in events if e.activity_task_scheduled_event_attributes.activity_type.name == "scheduler_pause"
    }
    pauses = [e.event_id for e in events if e.activity_task_completed_event_attributes.scheduled_event_id in scheduled]
    signals = [e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert len(pauses) > 20 and len(signals) == 4 and max(signals) < pauses[-2]


@pytest.fixture
async def client_and_queue() -> object:
    activities = [find_assignments_activity, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler,
                  scheduler_pause]  # fmt: skip
    async with workflows_on_dev_server("sched-carry", [SchedulerWorkflow], activities) as pair:
        yield pair


def test_placements_replaced_whole_while_packed_are_compared_one_by_one() -> None:
    """No log covers a mapping put in place of the one the packing started with: every placement is compared."""
    state = _state()
    packer = Packer(state, step=4, chunk=4)
    packer.step()
    kept = {key: p for key, p in state.placements.items() if p.task_index % 3}
    state.placements = Placements(kept)
    state.placements["new/task-0"] = Placement("new", 0, 0, "w39", 100, 2**20, 0, 0)
    assert state == unpack(packer.finish(state))


def test_a_run_that_handed_its_state_over_answers_its_counts_and_refuses_the_rest() -> None:
    """A query that reaches a run after it continued as new is not answered by unpacking the whole state in
    that one activation (~0.4 s at 10,000 workers, near the SDK's deadlock detector on a busy controller):
    the counts handed over answer `summary`; anything else is refused, and an Iris client asks the next run."""
    core = SchedulerCore(pack(_state()), signal_budget=1_000)
    assert SchedulerPhase.SERVING == core.phase  # a small carry loads at once
    assert WORKERS == len(core.whole().workers)
    core.move(SchedulerEvent.RUN_SHOULD_END)
    core.let_go([WORKERS, WORKERS, 20, PLACED])
    assert (WORKERS, 20, PLACED) == (core.handed_over.total_workers, core.handed_over.pending_tasks,
                                     core.handed_over.running_tasks)  # type: ignore[union-attr]  # fmt: skip
    for read in (core.whole, lambda: core.state):
        with pytest.raises(RuntimeError, match=f"^{SCHEDULER_NOT_WHOLE}: this run handed it to the next"):
            read()
