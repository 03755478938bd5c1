"""The pass's snapshot (workflows/scheduler/snapshot_cache.py): through any sequence of changes, what the
scheduling activity reads of it is what the state says, whether the run is new or has passed before."""

from __future__ import annotations

import random

import pytest

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import share_from_pb, snapshot_from_pb
from scheduler.types import Resources
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import ConstraintSpec, SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.sharing_state import Hold
from workflows.scheduler.snapshot_cache import SnapshotCache, encode_snapshot


def _vector(r: Resources | None) -> tuple[int, ...]:
    return () if r is None else (r.cpu_millis, r.memory_bytes, r.gpus, r.tpus)


def decoded(data: bytes) -> tuple[object, ...]:
    """What the scheduling activity reads of a snapshot, as plain values in an order of their own."""
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(data))
    workers, jobs = snapshot_from_pb(snap)
    share = share_from_pb(snap)
    assert share is not None
    fleet = [(w.worker_id, _vector(w.free), _vector(w.capacity), sorted(w.attributes.items())) for w in workers]
    queue = sorted((j.job_id, j.task_indices, j.waited_seconds, _vector(j.request), j.user, str(j.band), j.placed)
                   for j in jobs)  # fmt: skip
    running = sorted((j.job_id, sorted((t.task_index, t.worker_id, t.started_at) for t in j.tasks), j.user,
                      str(j.band), _vector(j.request), j.coscheduled) for j in share.running)  # fmt: skip
    return fleet, queue, running


def expected(state: SchedulerState, now: float) -> tuple[object, ...]:
    """The same, worked out from the state by hand: the workers a pass may use (healthy, not cordoned, not
    quarantined, not held for a preemptor) with what their placements leave free; the queued jobs not waiting
    for a preemptor's victims; the placed tasks on those workers but the attempts being evicted."""
    held, evicting, waiting = state.books.held_workers(), state.books.evicting(), state.books.waiting()
    usable = {w.worker_id: w for w in state.workers.values()
              if w.healthy and not w.cordoned and w.suspect_until <= now and w.worker_id not in held}  # fmt: skip
    used: dict[str, list[int]] = {}
    for p in state.placements.values():
        u = used.setdefault(p.worker_id, [0, 0, 0, 0])
        for i, v in enumerate((p.cpu_millis, p.memory_bytes, p.gpus, p.tpus)):
            u[i] += v
    fleet = []
    for w in usable.values():
        cap = (w.cpu_millis, w.memory_bytes, w.gpus, w.tpus)
        u = used.get(w.worker_id, [0, 0, 0, 0])
        fleet.append((w.worker_id, tuple(max(0, c - x) for c, x in zip(cap, u, strict=True)), cap,
                      sorted(w.attributes.items())))  # fmt: skip
    queue = sorted((e.job_id, tuple(sorted(e.attempts)), max(0.0, now - e.submitted_at),
                    (e.spec.cpu_millis, e.spec.memory_bytes, e.spec.gpus, e.spec.tpus), e.spec.user,
                    e.spec.band or "interactive", 0) for e in state.pending.values() if e.job_id not in waiting)
    jobs: dict[str, tuple[Placement, list[tuple[int, str, float]]]] = {}
    for key, p in state.placements.items():
        if evicting.get(key, -1) >= p.attempt:
            continue
        _, tasks = jobs.setdefault(p.job_id, (p, []))
        if p.worker_id in usable:
            tasks.append((p.task_index, p.worker_id, p.placed_at))
    running = sorted((job_id, sorted(tasks), p.user, p.band or "interactive",
                      (p.cpu_millis, p.memory_bytes, p.gpus, p.tpus), p.gang)
                     for job_id, (p, tasks) in jobs.items() if tasks)  # fmt: skip
    return fleet, queue, running


def _change(rng: random.Random, state: SchedulerState, now: float, serial: int) -> None:
    """One thing that happens between passes."""
    ids = list(state.workers)
    op = rng.choice(("place", "place", "release", "enqueue", "reason", "cordon", "lose", "register", "evict",
                     "quarantine", "requeue", "forget", "claim", "again", "nothing"))  # fmt: skip
    if op == "place" and state.pending:
        entry = rng.choice(list(state.pending.values()))
        for index in list(entry.attempts)[: rng.randint(1, 3)]:
            attempt = entry.attempts.pop(index)
            s = entry.spec
            state.placements[task_workflow_id(entry.job_id, index)] = Placement(
                entry.job_id, index, attempt, rng.choice(ids), s.cpu_millis, s.memory_bytes, s.gpus, s.tpus,
                user=s.user, band=s.band or "interactive", gang=bool(s.group_by), placed_at=now,
            )  # fmt: skip
        if not entry.attempts:
            del state.pending[entry.job_id]
    elif op == "release" and state.placements:
        del state.placements[rng.choice(list(state.placements))]
    elif op == "enqueue":
        spec = SchedulingSpec(cpu_millis=rng.choice((100, 500)), memory_bytes=1 << 28, gpus=rng.choice((0, 1)),
                              constraints=[ConstraintSpec("zone", "EQ", "z1")] if rng.random() < 0.3 else [],
                              group_by=rng.choice(("", "zone")), user=f"u{serial % 3}",
                              band=rng.choice(("", "batch")))  # fmt: skip
        job_id = f"job-{serial}-{rng.randrange(10**9)}"  # one spec a job: a second enqueue in a turn is another job
        state.pending[job_id] = PendingEntry(job_id, spec, dict.fromkeys(range(rng.randint(1, 5)), 0), now)
    elif op == "reason" and state.pending:
        state.pending_reasons[rng.choice(list(state.pending))] = f"no room ({serial})"
    elif op == "cordon":
        w = state.workers[rng.choice(ids)]
        w.cordoned = not w.cordoned
    elif op == "lose":
        state.workers[rng.choice(ids)].state = WorkerState.LOST
    elif op == "quarantine":
        state.workers[rng.choice(ids)].suspect_until = now + rng.choice((-1.0, 5.0))
    elif op == "register":  # a new worker, or an agent registering again: a new entry
        worker_id = rng.choice((f"w{serial}", rng.choice(ids)))
        flag = rng.choice((1, True, 1.0, "1"))  # equal in Python, not in an attribute's encoding
        state.workers[worker_id] = WorkerEntry(worker_id, f"s{serial}", 4_000, 8 << 30, 2, 0,
                                               {"zone": f"z{serial % 2}", "flag": flag})  # fmt: skip
    elif op == "evict" and state.placements and state.pending:
        victims = rng.sample(list(state.placements), min(2, len(state.placements)))
        state.books.holds[rng.choice(list(state.pending))] = Hold(
            [rng.choice(ids)], {key: state.placements[key].attempt for key in victims}, now
        )
    elif op == "claim":  # a task claims its place on a worker that has not registered yet (it may soon)
        state.placements[task_workflow_id(f"claimed-{serial}", 0)] = Placement(
            f"claimed-{serial}", 0, 0, f"w{serial + rng.randint(1, 3)}", 100, 1 << 28, 0, 0, placed_at=now
        )
    elif op == "forget" and len(ids) > 4:  # a lost worker removed, with what was placed there
        gone = rng.choice(ids)
        del state.workers[gone]
        for key in [k for k, p in state.placements.items() if p.worker_id == gone]:
            del state.placements[key]
    elif op == "again" and state.placements:  # a job's placements all gone, then back
        job_id = rng.choice(list(state.placements.jobs))
        tasks = dict(state.placements.jobs[job_id])
        for key in tasks:
            del state.placements[key]
        for key, p in tasks.items():
            state.placements[key] = p
    elif op == "requeue" and state.pending:  # a task's attempt queued again: the same entry changes
        entry = rng.choice(list(state.pending.values()))
        entry.attempts[max(entry.attempts) + 1] = 1


@pytest.mark.parametrize("seed", range(10))
def test_the_snapshot_is_what_the_state_says(seed: int) -> None:
    """Through random changes (and now and then a continue-as-new), every pass's snapshot decodes to what the
    state says, a pass after others gives byte for byte what a new run's first pass gives, and a query's
    encoding is the pass's."""
    rng = random.Random(seed)
    state = SchedulerState()
    for i in range(12):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 2, 0, {"zone": f"z{i % 2}"})
    cache = SnapshotCache()
    for serial in range(60):
        now = 100.0 + serial
        for _ in range(rng.randint(0, 4)):
            _change(rng, state, now, serial)
        if rng.random() < 0.1:  # continue-as-new: a new run, nothing cached
            state, cache = unpack(pack(state)), SnapshotCache()
        data = cache.build(state, now)
        assert encode_snapshot(state, now) == data
        assert cache.encode(state, now) == data  # a query's encoding, reading the cache
        assert expected(state, now) == decoded(data)


def _changed(value: object) -> object:
    """Another value of the same kind."""
    if isinstance(value, WorkerState):
        return WorkerState.QUARANTINED if value is WorkerState.READY else WorkerState.READY
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, tuple):
        return tuple(v + 1 for v in value)
    raise AssertionError(f"no other value for {value!r}")


SETTABLE = sorted(name for name, v in vars(WorkerEntry).items() if isinstance(v, property) and v.fset is not None)


@pytest.mark.parametrize("name", SETTABLE)
def test_a_worker_changed_after_a_pass_is_sent_and_carried_as_it_is_now(name: str) -> None:
    """Each worker keeps its serialized row for the next passes and the carry; every setter of a worker (all of
    them, read from the class) makes the next pass send the row as it is now, as a new run would, and the next
    run take it as it is now."""
    state = SchedulerState()
    for i in range(3):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 2, 0, {"zone": f"z{i % 2}"})
    cache = SnapshotCache()
    cache.build(state, 10.0)
    worker = state.workers["w1"]
    setattr(worker, name, _changed(getattr(worker, name)))
    if name == "worker_id":  # a worker keyed by its id: taken in under its new one
        state.workers[worker.worker_id] = state.workers.pop("w1")
    carried = unpack(pack(state))
    assert [w.row for w in state.workers.values()] == [w.row for w in carried.workers.values()]
    assert _fleet_rows(cache.build(state, 10.0)) == _fleet_rows(encode_snapshot(carried, 10.0))


def _fleet_rows(data: bytes) -> list[pb.WorkerRow]:
    return list(map(pb.WorkerRow.FromString, pb.SchedulingSnapshot.FromString(compressed.decompress(data)).fleet.rows))


def test_a_query_leaves_the_cache_as_it_was() -> None:
    """The autoscaler's query reads the cache but never fills it (queries are not replayed)."""
    state = SchedulerState()
    state.pending["j"] = PendingEntry("j", SchedulingSpec(cpu_millis=100, memory_bytes=1), {0: 0, 1: 0}, 1.0)
    cache = SnapshotCache()
    cache.encode(state, 2.0)
    assert {} == cache.specs
    cache.build(state, 2.0)
    assert [state.pending["j"].spec] == [spec for spec, _ in cache.specs.values()]


def test_a_jobs_wait_is_read_from_its_submission_time() -> None:
    """The snapshot carries when a job was submitted; the activity reads its wait against the pass's time."""
    state = SchedulerState()
    state.pending["j"] = PendingEntry("j", SchedulingSpec(cpu_millis=100, memory_bytes=1), {0: 0}, 40.0)
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(state, 100.0)))
    assert [40.0] == list(snap.queue.submitted_at)
    assert 60.0 == snapshot_from_pb(snap)[1][0].waited_seconds


def test_the_snapshot_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks snapshot` at a small size prints each figure."""
    from benchmarks.snapshot import main

    assert 0 == main(["--workers", "20", "--placed", "200", "--pending", "100", "--commit", "20"])
    out = capsys.readouterr().out
    for figure in ("committed capacity", "first pass of a run", "nothing changed", "placed/released", "after a cordon"):
        assert figure in out
