"""The scheduler's snapshot from one walk over the whole state: what the pass did before it built its
snapshot from cached pieces (workflows/scheduler/snapshot_cache.py).

Kept out of the product as the oracle the cached build is checked against (tests/test_snapshot_cache.py,
tests/test_scheduler_state.py) and the baseline `python -m benchmarks snapshot` compares it with.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_attr, set_constraint
from workflows.scheduler import reservation_state
from workflows.scheduler.scheduler_state import SchedulerState, committed
from workflows.scheduler.sharing_state import fill_share

SNAPSHOT_PART = 5_000  # workers, or queued jobs, per part


def snapshot_parts(state: SchedulerState, now: float, most: int = SNAPSHOT_PART) -> Iterator[bytes]:
    """The snapshot from one walk over the whole state, in serialized parts: workers (`most` a part),
    sharing's part, the queue (`most` jobs a part) and reservations; the first part is empty.

    Serialized protobuf messages concatenate into their merge, so the parts joined are the snapshot.
    The pass builds its snapshot from cached pieces (workflows/scheduler/snapshot_cache.py); this plain encoding
    is what those are checked against.
    """
    used = committed(state)
    yield b""
    snap = pb.SchedulingSnapshot(now=now)
    held = state.books.held_workers()  # kept for a preemptor whose victims are stopping
    rows: dict[str, int] = {}
    for w in state.workers.values():
        if not w.healthy or w.cordoned or w.suspect_until > now or w.worker_id in held:
            continue
        if len(snap.workers) >= most:
            yield snap.SerializeToString()
            snap = pb.SchedulingSnapshot()
        rows[w.worker_id] = len(rows)
        u = used.get(w.worker_id, [0, 0, 0, 0])
        sw = snap.workers.add(worker_id=w.worker_id)
        sw.free.cpu_millis = max(0, w.cpu_millis - u[0])
        sw.free.memory_bytes = max(0, w.memory_bytes - u[1])
        sw.free.gpus = max(0, w.gpus - u[2])
        sw.free.tpus = max(0, w.tpus - u[3])
        sw.capacity.cpu_millis, sw.capacity.memory_bytes = w.cpu_millis, w.memory_bytes
        sw.capacity.gpus, sw.capacity.tpus = w.gpus, w.tpus
        for key, value in w.attributes.items():
            set_attr(sw.attributes[key], value)
    yield snap.SerializeToString()
    snap = pb.SchedulingSnapshot()
    fill_share(snap.share, state.books, state.placements.items(), rows)
    yield snap.SerializeToString()
    snap = pb.SchedulingSnapshot()
    waiting = state.books.waiting()
    for entry in state.pending.values():
        if entry.job_id in waiting:
            continue
        if len(snap.jobs) >= most:
            yield snap.SerializeToString()
            snap = pb.SchedulingSnapshot()
        spec = entry.spec
        sj = snap.jobs.add(
            job_id=entry.job_id,
            task_indices=sorted(entry.attempts),
            group_by=spec.group_by,
            priority=spec.priority,
            waited_seconds=max(0.0, now - entry.submitted_at),
            scheduling_timeout_seconds=spec.scheduling_timeout_seconds,
            tolerations=spec.tolerations,
            num_groups=spec.num_groups if spec.num_groups > 1 else 0,
            band=spec.band,
            user=spec.user,
            max_concurrent=spec.max_concurrent,
            placed=len(state.placements.jobs.get(entry.job_id) or ()) if spec.max_concurrent else 0,
        )
        reason = state.pending_reasons.get(entry.job_id)
        if reason:
            sj.reason_crc = zlib.crc32(reason.encode())  # the activity sends back only reasons that changed
        sj.request.cpu_millis = spec.cpu_millis
        sj.request.memory_bytes = spec.memory_bytes
        sj.request.gpus = spec.gpus
        sj.request.tpus = spec.tpus
        for c in spec.constraints:
            set_constraint(sj.constraints.add(), c.key, c.op, c.value, c.soft)
    reservation_state.encode(snap, state, now)
    yield snap.SerializeToString()
