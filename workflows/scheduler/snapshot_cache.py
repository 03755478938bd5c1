"""The pass's snapshot from cached pieces: a pass re-encodes only what changed since the last one.

Serialized protobuf messages concatenate into their merge, so the snapshot is the join of small
serialized `SchedulingSnapshot`s: one per eligible worker, sharing's header and one per running job,
one per queued job, and the reservations. Each piece is kept with what it depends on and reused while
that is unchanged:

- a worker's entry is keyed by its `WorkerEntry` (replaced, never changed in place, when the worker
  registers again) and its used capacity (`Placements.used`); the free capacity, the only part that
  changes with placements, is a serialized message of its own merged in (most workers share a few free
  values);
- a running job's entry by its placements' stamp (`Placements.stamps`) and its attempts being evicted.
  Its `worker_rows` are the worker numbers of its placement columns, copied as they are, and the snapshot
  says where each number's worker is in it (`share.row_positions`, -1 outside), so a worker cordoned,
  lost, quarantined, held or removed, or a new one, re-encodes no running job;
- a queued job's entry by its `PendingEntry`, spec, queued task indices and pending reason (and, for a
  throttled array, how many of its tasks are placed); it carries its submission time (`submitted_at`),
  not its wait, so it does not change with the clock.

The cache is workflow memory only, a pure function of the state: rebuilt from nothing after
continue-as-new or a replay, never carried. It is updated only by the pass (`SnapshotBuild`), never by
a query, so how much a pass has left to encode, and so how many workflow tasks it takes, is the same
when the history is replayed. The bytes are those of an encoding with an empty cache.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_constraint
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler import reservation_state
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.sharing_state import fill_share_header, running_job

# Work units (about a microsecond of CPU each on a loaded 2-core machine, half that on a quiet one; the
# sandbox adds some) a build does per workflow task. A warm pass at 10,000 workers and 100,000 tasks
# takes ~30,000 (the walks over workers, running and queued jobs): one step. A cold one (the first after
# continue-as-new) ~170,000: about five steps of a workflow task each.
STEP_WORK = 40_000
_HIT = 1  # a piece found in the cache
_FREE = 1  # a worker's free capacity merged in
_WORKER = 5  # a worker's entry encoded (its capacity and attributes copied from its row)
_JOB = 3  # a queued job's entry encoded (its spec's part encoded once), plus a unit per four task indices
_RUNNING = 5  # a running job's entry encoded (its columns copied whole), plus a unit per shape it runs in


_DONE = object()


def _worker_static(w: WorkerEntry, shapes: dict[bytes, bytes]) -> bytes:
    """A serialized `SchedulingWorker` without its free capacity: its id, then its capacity and attributes,
    copied from its row in C (never decoded to Python values), one bytes object per distinct shape (`shapes`).
    Serialized messages concatenate into their merge, so id, shape and free capacity are encoded apart and joined."""
    row = w.row
    sw = pb.SchedulingWorker()
    sw.capacity.cpu_millis, sw.capacity.memory_bytes = row.cpu_millis, row.memory_bytes
    sw.capacity.gpus, sw.capacity.tpus = row.gpus, row.tpus
    sw.attributes.MergeFrom(row.attributes)
    rest = sw.SerializeToString(deterministic=True)  # map entries in key order: equal shapes, equal bytes
    rest = shapes.setdefault(rest, rest)
    return pb.SchedulingWorker(worker_id=row.worker_id).SerializeToString() + rest


def _spec_piece(spec: SchedulingSpec) -> bytes:
    """A serialized `SchedulingJob` with what its spec says: jobs share specs (the queue keeps each distinct
    one once), so a job's entry is its own fields merged with its spec's, encoded once."""
    sj = pb.SchedulingJob(
        group_by=spec.group_by,
        priority=spec.priority,
        scheduling_timeout_seconds=spec.scheduling_timeout_seconds,
        tolerations=spec.tolerations,
        num_groups=spec.num_groups if spec.num_groups > 1 else 0,
        band=spec.band,
        user=spec.user,
        max_concurrent=spec.max_concurrent,
    )
    sj.request.cpu_millis = spec.cpu_millis
    sj.request.memory_bytes = spec.memory_bytes
    sj.request.gpus = spec.gpus
    sj.request.tpus = spec.tpus
    for c in spec.constraints:
        set_constraint(sj.constraints.add(), c.key, c.op, c.value, c.soft)
    return sj.SerializeToString()


def _job_piece(entry: PendingEntry, spec: bytes, indices: list[int], reason: str, placed: int = 0) -> bytes:
    snap = pb.SchedulingSnapshot()
    sj = snap.jobs.add(job_id=entry.job_id, task_indices=indices, submitted_at=entry.submitted_at, placed=placed,
                       room_at=entry.room_at)  # fmt: skip
    sj.MergeFromString(spec)
    if reason:
        sj.reason_crc = zlib.crc32(reason.encode())  # the activity sends back only reasons that changed
    return snap.SerializeToString()


class SnapshotCache:
    """The snapshot's pieces as the last pass encoded them (see the module)."""

    def __init__(self) -> None:
        # worker id -> (its entry, its used capacity then, its entry without free capacity, with it)
        self.workers: dict[str, tuple[WorkerEntry, list[int], bytes, bytes]] = {}
        self.free: dict[tuple[int, int, int, int], bytes] = {}  # free capacity -> a SchedulingWorker with it
        self.shapes: dict[bytes, bytes] = {}  # a worker's entry but its id and free capacity, each distinct one once
        # job id -> (its placements' stamp, the placements' worker numbering, its attempts being evicted; its piece)
        self.running: dict[str, tuple[int, int, Any, bytes]] = {}
        # job id -> (entry, spec, task indices, pending reason, its piece, its tasks placed if throttled)
        self.jobs: dict[str, tuple[PendingEntry, SchedulingSpec, list[int], str, bytes, int, float]] = {}
        self.specs: dict[int, tuple[SchedulingSpec, bytes]] = {}  # id(spec) -> (the spec, `_spec_piece`)

    def build(self, state: SchedulerState, now: float, *, step_work: int = STEP_WORK) -> SnapshotBuild:
        """A build of the snapshot that keeps what it encodes for the next one (the pass's)."""
        return SnapshotBuild(self, state, now, step_work=step_work, keep=True)

    def encode(self, state: SchedulerState, now: float) -> bytes:
        """The snapshot at once, reading the cache but leaving it as it is (queries: they are not replayed)."""
        build = SnapshotBuild(self, state, now, step_work=0, keep=False)
        while not build.step():
            pass
        return build.result()


def encode_snapshot(state: SchedulerState, now: float) -> bytes:
    """zlib(SchedulingSnapshot) of the state, from nothing (tests, tools, and the cache's reference)."""
    return SnapshotCache().encode(state, now)


class SnapshotBuild:
    """One snapshot, built `step()` by `step()`, about `step_work` units each (0: all in one step).

    The state may change between steps (the scheduler handles signals in between), as it does while the
    pass runs anyway: the commit checks every placement against the state as it is then.
    """

    def __init__(self, cache: SnapshotCache, state: SchedulerState, now: float, *, step_work: int,
                 keep: bool) -> None:  # fmt: skip
        self._cache, self._state, self._now = cache, state, now
        self._step_work, self._keep = step_work, keep
        self._parts: list[bytes] = []
        self._limit = step_work if step_work > 0 else float("inf")  # work units per step
        self._work = 0  # done in this step by the stages before
        self._steps = self._run()
        self._done = False
        self.steps = 0

    def step(self) -> bool:
        """Build about `step_work` units more; True once the snapshot is whole."""
        self.steps += 1
        if next(self._steps, _DONE) is _DONE:
            self._done = True
        return self._done

    def result(self) -> bytes:
        assert self._done, "the snapshot is not whole yet"
        return zlib.compress(b"".join(self._parts), 1)

    def _run(self) -> Iterator[None]:
        yield from self._workers()
        yield from self._running()
        yield from self._jobs()
        snap = pb.SchedulingSnapshot()
        reservation_state.encode(snap, self._state, self._now)
        # Where each worker number the running jobs' rows use is in the snapshot. Read last: a placement
        # made between two steps may number a worker, which `names` then holds (it only grows in a run).
        names = self._state.placements.names
        if names:
            at = {worker_id: i for i, worker_id in enumerate(self._layout)}
            snap.share.row_positions.extend([at.get(worker_id, -1) for worker_id in names])
        self._parts.append(snap.SerializeToString())

    def _workers(self) -> Iterator[None]:
        state, cache, now = self._state, self._cache, self._now
        self._parts.append(pb.SchedulingSnapshot(now=now).SerializeToString())
        held = state.books.held_workers()  # kept for a preemptor whose victims are stopping
        used_by = state.placements.used
        old = cache.workers
        new = dict(old) if self._keep else old  # pieces of workers gone are dropped at the end
        if self._keep and len(cache.free) + len(cache.shapes) > 4 * len(state.workers) + 1_000:
            cache.free, cache.shapes = {}, {}  # values seen before, most no longer any worker's: kept bounded
        free_cache = cache.free if self._keep else dict(cache.free)
        shapes = cache.shapes if self._keep else dict(cache.shapes)
        layout: list[str] = []
        parts = self._parts
        zero = [0, 0, 0, 0]
        work, limit = self._work, self._limit
        entries = list(state.workers.values())
        lost = WorkerState.LOST
        for w in entries:
            row = w.row  # its fields read from the message, not through the entry's properties
            worker_id = row.worker_id
            if row.state == lost or row.cordoned or row.suspect_until > now or worker_id in held:
                continue
            layout.append(worker_id)
            used = used_by.get(worker_id) or zero
            got = new.get(worker_id)
            if got is not None and got[0] is w and got[1] == used:
                parts.append(got[3])
                work += _HIT
                if work >= limit:
                    work = 0
                    yield
                continue
            units = _FREE
            if got is not None and got[0] is w:
                static = got[2]
            else:
                static = _worker_static(w, shapes)
                units += _WORKER
            free = (max(0, row.cpu_millis - used[0]), max(0, row.memory_bytes - used[1]),
                    max(0, row.gpus - used[2]), max(0, row.tpus - used[3]))  # fmt: skip
            field = free_cache.get(free)
            if field is None:
                res = pb.Resources(cpu_millis=free[0], memory_bytes=free[1], gpus=free[2], tpus=free[3])
                field = free_cache[free] = pb.SchedulingWorker(free=res).SerializeToString()
            snap = pb.SchedulingSnapshot()
            snap.workers.add().MergeFromString(static + field)
            piece = snap.SerializeToString()
            if self._keep:
                new[worker_id] = (w, list(used), static, piece)
            parts.append(piece)
            work += units
            if work >= limit:
                work = 0
                yield
        self._work = work
        self._layout = layout
        if self._keep:
            live = state.workers
            cache.workers = {k: v for k, v in new.items() if k in live} if len(new) > len(live) else new

    def _running(self) -> Iterator[None]:
        state, cache = self._state, self._cache
        snap = pb.SchedulingSnapshot()
        fill_share_header(snap.share, state.books)
        self._parts.append(snap.SerializeToString())
        placements = state.placements
        evicting: dict[str, list[tuple[str, int]]] = {}
        for key, attempt in state.books.evicting().items():
            p = placements.get(key)
            if p is not None:
                evicting.setdefault(p.job_id, []).append((key, attempt))
        numbering = placements.numbering
        old = cache.running
        new: dict[str, tuple[int, int, Any, bytes]] = {}
        stamps = placements.stamps
        parts, work, limit = self._parts, self._work, self._limit
        columns = placements.columns
        for job_id in list(placements.jobs):
            job = columns(job_id)  # read with its stamp: the job may have changed between two steps
            if job is None:
                continue  # its last placement went while the build waited between steps
            stamp = stamps[job_id]
            stopping = evicting.get(job_id)
            sig = tuple(sorted(stopping)) if stopping else None
            got = old.get(job_id)
            if got is not None and got[0] == stamp and got[1] == numbering and got[2] == sig:
                new[job_id] = got
                piece = got[3]
                units = _HIT
            else:
                runs = job.runs
                piece = running_job(job_id, runs, dict(stopping) if stopping else None)
                new[job_id] = (stamp, numbering, sig, piece)
                units = _RUNNING + len(runs)
            if piece:
                parts.append(piece)
            work += units
            if work >= limit:
                work = 0
                yield
        self._work = work
        if self._keep:
            cache.running = new

    def _jobs(self) -> Iterator[None]:
        state, cache = self._state, self._cache
        waiting = state.books.waiting()
        reasons = state.pending_reasons
        old = cache.jobs
        new: dict[str, tuple[PendingEntry, SchedulingSpec, list[int], str, bytes, int, float]] = {}
        parts, work, limit = self._parts, self._work, self._limit
        placements = state.placements
        if self._keep and len(cache.specs) > 2 * len(state.pending) + 100:
            cache.specs = {}  # specs of jobs gone, most of them: kept bounded
        specs = cache.specs if self._keep else dict(cache.specs)
        for entry in list(state.pending.values()):
            job_id = entry.job_id
            if job_id in waiting:
                continue
            spec = entry.spec
            indices = sorted(entry.attempts)
            reason = reasons.get(job_id, "")
            placed = placements.placed(job_id) if spec.max_concurrent else 0
            got = old.get(job_id)
            if (got is not None and got[0] is entry and got[1] is spec and got[2] == indices and got[3] == reason
                    and got[5] == placed and got[6] == entry.room_at):  # fmt: skip
                new[job_id] = got
                piece = got[4]
                units = _HIT
            else:
                known = specs.get(id(spec))
                if known is None or known[0] is not spec:
                    known = specs[id(spec)] = (spec, _spec_piece(spec))
                piece = _job_piece(entry, known[1], indices, reason, placed)
                new[job_id] = (entry, spec, indices, reason, piece, placed, entry.room_at)
                units = _JOB + len(indices) // 4
            parts.append(piece)
            work += units
            if work >= limit:
                work = 0
                yield
        self._work = work
        if self._keep:
            cache.jobs = new
