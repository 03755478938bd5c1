"""The pass's snapshot from cached pieces (workflows/scheduler/snapshot_cache.py): byte for byte the snapshot an
empty cache encodes, and the same workers, jobs and running work for the scheduler as the plain encoding
of the whole state, through any sequence of changes."""

from __future__ import annotations

import random
import zlib

import pytest

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb
from activities.scheduling import share_from_pb, snapshot_from_pb
from benchmarks.whole_snapshot import snapshot_parts
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import ConstraintSpec, SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.sharing_state import Hold
from workflows.scheduler.snapshot_cache import SnapshotCache, encode_snapshot


def decoded(data: bytes) -> tuple[object, ...]:
    """What the scheduling activity reads of a snapshot, in an order that does not depend on the encoding's."""
    snap = pb.SchedulingSnapshot.FromString(data)
    workers, jobs = snapshot_from_pb(snap)
    share = share_from_pb(snap)
    assert share is not None
    running = sorted((j.job_id, sorted(j.tasks), j.user, j.band, j.request, j.coscheduled) for j in share.running)
    return workers, jobs, running, share.users, share.policy, share.now, share.default_credits


def reference(state: SchedulerState, now: float) -> tuple[object, ...]:
    return decoded(b"".join(snapshot_parts(state, now)))


def _change(rng: random.Random, state: SchedulerState, now: float, serial: int) -> None:
    """One thing that happens between passes."""
    ids = list(state.workers)
    op = rng.choice(("place", "place", "release", "enqueue", "reason", "cordon", "lose", "register", "evict",
                     "quarantine", "requeue", "forget", "claim", "nothing"))  # fmt: skip
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
        job_id = f"job-{serial}"
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
    elif op == "requeue" and state.pending:  # a task's attempt queued again: the same entry changes
        entry = rng.choice(list(state.pending.values()))
        entry.attempts[max(entry.attempts) + 1] = 1


@pytest.mark.parametrize("seed", range(10))
def test_cached_snapshot_is_the_snapshot_from_nothing(seed: int) -> None:
    """Through random changes, passes built in small steps from the cache give byte for byte what an
    empty cache gives at once, and decode to what the plain whole-state encoding decodes to."""
    rng = random.Random(seed)
    state = SchedulerState()
    for i in range(12):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 2, 0, {"zone": f"z{i % 2}"})
    cache = SnapshotCache()
    hits = 0
    for serial in range(60):
        now = 100.0 + serial
        for _ in range(rng.randint(0, 4)):
            _change(rng, state, now, serial)
        if rng.random() < 0.1:  # continue-as-new: the cache is rebuilt from nothing
            state, cache = unpack(pack(state)), SnapshotCache()
        build = cache.build(state, now, step_work=rng.choice((0, 3, 20)))
        while not build.step():
            pass
        cached = build.result()
        hits += sum(1 for w in cache.workers.values() if w[0] is state.workers.get(w[0].worker_id))
        assert encode_snapshot(state, now) == cached
        assert cache.encode(state, now) == cached  # a query's encoding, reading the cache
        assert reference(state, now) == decoded(zlib.decompress(cached))
    assert hits, "pieces were reused"


@pytest.mark.parametrize("seed", range(6))
def test_changes_between_a_builds_steps_leave_no_stale_piece(seed: int) -> None:
    """The scheduler handles signals between two steps of a build; whatever they change (a job's
    placements gone and back, a worker replaced), the next build is still the snapshot from nothing."""
    rng = random.Random(seed)
    state = SchedulerState()
    for i in range(12):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 2, 0, {"zone": f"z{i % 2}"})
    cache = SnapshotCache()
    for serial in range(40):
        now = 100.0 + serial
        build = cache.build(state, now, step_work=rng.choice((2, 5)))
        while not build.step():
            for _ in range(rng.randint(0, 2)):
                _change(rng, state, now, serial)
            if state.placements and rng.random() < 0.3:  # a job's placements all gone, then back
                job_id = rng.choice(list(state.placements.jobs))
                tasks = dict(state.placements.jobs[job_id])
                for key in tasks:
                    del state.placements[key]
                for key, p in tasks.items():
                    state.placements[key] = p
        build.result()
        again = cache.build(state, now, step_work=0)
        again.step()
        assert encode_snapshot(state, now) == again.result()


def test_a_query_leaves_the_cache_as_it_was() -> None:
    """The autoscaler's query reads the cache but never fills it: a pass after it has as much left to
    encode as without it, so the pass's workflow tasks are those a replay (without the query) makes."""
    state = SchedulerState()
    for i in range(50):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 0, 0, {"zone": "z"})
    state.pending["j"] = PendingEntry("j", SchedulingSpec(cpu_millis=100, memory_bytes=1), {0: 0, 1: 0}, 1.0)
    queried, quiet = SnapshotCache(), SnapshotCache()
    queried.encode(state, 2.0)
    steps = []
    for cache in (queried, quiet):
        build = cache.build(state, 2.0, step_work=20)
        while not build.step():
            pass
        steps.append(build.steps)
    assert steps[0] == steps[1] > 1


def test_a_warm_pass_encodes_only_what_changed() -> None:
    """With nothing changed, a pass reuses every piece and needs one step where a cold one needed many."""
    state = SchedulerState()
    for i in range(200):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 0, 0, {"zone": "z"})
    for i in range(400):
        state.placements[task_workflow_id(f"r{i // 4}", i % 4)] = Placement(f"r{i // 4}", i % 4, 0, f"w{i % 200}",
                                                                            100, 1, 0, 0)  # fmt: skip
    state.pending["j"] = PendingEntry("j", SchedulingSpec(cpu_millis=100, memory_bytes=1), {0: 0}, 1.0)
    cache = SnapshotCache()
    steps = []
    for now in (2.0, 3.0):
        build = cache.build(state, now, step_work=1_000)
        while not build.step():
            pass
        steps.append(build.steps)
    assert steps[0] > 1 == steps[1]


def test_a_cordon_or_a_new_worker_reencodes_no_running_job() -> None:
    """Running jobs' worker rows are their placements' worker numbers, so a worker leaving the snapshot
    (cordoned, or removed) or a new one joining it changes one worker's piece and where each is, not the
    pieces of the running jobs."""
    state = SchedulerState()
    for i in range(10):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, 0, 0, {"zone": "z"})
    for i in range(30):
        state.placements[task_workflow_id(f"r{i // 3}", i % 3)] = Placement(f"r{i // 3}", i % 3, 0, f"w{i % 10}",
                                                                            100, 1, 0, 0)  # fmt: skip
    cache = SnapshotCache()
    state.workers["idle"] = WorkerEntry("idle", "s", 4_000, 8 << 30, 0, 0, {"zone": "z"})
    for now, change in ((1.0, None), (2.0, "cordon"), (3.0, "register"), (4.0, "remove")):
        if change == "cordon":
            state.workers["w3"].cordoned = True
        elif change == "register":
            state.workers["w10"] = WorkerEntry("w10", "s", 4_000, 8 << 30, 0, 0, {"zone": "z"})
        elif change == "remove":
            del state.workers["idle"]
        before = dict(cache.running)
        build = cache.build(state, now, step_work=0)
        build.step()
        assert encode_snapshot(state, now) == build.result()
        if change:
            assert all(before[job_id] is piece for job_id, piece in cache.running.items())


def test_a_jobs_wait_is_read_from_its_submission_time() -> None:
    """The snapshot carries when a job was submitted; the activity reads its wait against the pass's time."""
    state = SchedulerState()
    state.pending["j"] = PendingEntry("j", SchedulingSpec(cpu_millis=100, memory_bytes=1), {0: 0}, 40.0)
    snap = pb.SchedulingSnapshot.FromString(zlib.decompress(encode_snapshot(state, 100.0)))
    assert (40.0, 0.0) == (snap.jobs[0].submitted_at, snap.jobs[0].waited_seconds)
    assert 60.0 == snapshot_from_pb(snap)[1][0].waited_seconds


def test_the_snapshot_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks snapshot` at a small size prints each figure."""
    from benchmarks.snapshot import main

    assert 0 == main(["--workers", "20", "--placed", "200", "--pending", "100", "--commit", "20"])
    out = capsys.readouterr().out
    for figure in ("committed capacity", "plain whole encoding", "cold build", "warm", "after a cordon"):
        assert figure in out
