"""The scheduler workflow's state: its dataclasses and the scheduling snapshot.

Pure functions of the state (no Temporal calls), so they are unit-testable and
run the same inside the workflow and in tests. The packed form a run continues
as is in scheduler_carry.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from activities.contracts import DEFAULT_PORT_RANGE
from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr, set_attr
from workflows import reservation_state
from workflows.messages import SchedulingSpec
from workflows.placement_index import Placements
from workflows.reservation_state import HeldReservation
from workflows.scheduler_actions import ActionRow, new_ring
from workflows.sharing_state import Books, fill_share
from workflows.worker_lifecycle import WorkerState

SUPPORTED_RUNTIMES = ("process", "docker", "containerd")
SNAPSHOT_PART = 5_000  # workers, or queued jobs, per part of a snapshot built in parts (snapshot_parts)


@dataclass
class WorkerEntry:
    worker_id: str
    session: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    attributes: dict[str, Any]  # str | int | float | bool; Any keeps JSON types intact
    runtime: str = "process"
    state: WorkerState = WorkerState.READY  # moved only by worker_lifecycle's table
    suspect_until: float = 0.0  # workflow time; QUARANTINED until then
    dispatch_failures: int = 0  # consecutive; doubles the quarantine
    cordoned: bool = False  # the operator's: no new work; running tasks go on (a draining slice)
    lost_at: float = 0.0  # workflow time it was reported lost; removed LOST_RETENTION later
    host: str = ""  # the host name its agent registered with: a gang's coordinator address
    address: str = ""  # how other hosts reach its tasks (its registered address, else its host name)
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE  # the ports its tasks may be given

    @property
    def healthy(self) -> bool:
        """Its liveness session is alive (READY or QUARANTINED)."""
        return self.state != WorkerState.LOST


@dataclass
class PendingEntry:
    job_id: str
    spec: SchedulingSpec
    attempts: dict[int, int]  # task index -> attempt waiting for a place
    submitted_at: float


@dataclass
class Placement:
    job_id: str
    task_index: int
    attempt: int
    worker_id: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    ports: dict[str, int] = field(default_factory=dict)  # port name -> port held on its worker's host
    user: str = ""
    band: str = ""  # the band it was placed in (what preemption compares)
    gang: bool = False  # a coscheduled job's member: evicted with its whole gang
    placed_at: float = 0.0  # workflow time: the attempt is charged from here to its release


@dataclass
class SchedulerState:
    store_url: str = ""
    workers: dict[str, WorkerEntry] = field(default_factory=dict)
    pending: dict[str, PendingEntry] = field(default_factory=dict)  # FIFO by insertion
    # Task workflow id -> placement; keeps what each worker has committed and each job's placements.
    placements: Placements = field(default_factory=Placements)
    pending_reasons: dict[str, str] = field(default_factory=dict)
    actions: deque[ActionRow] = field(default_factory=new_ring)  # recent placements, requeues, cordons
    port_cursors: dict[str, int] = field(default_factory=dict)  # host address -> last port handed out
    # Keys of placements that hold ports (a superset: a key whose placement is gone is dropped when
    # next read), so booking ports reads those few, not every placement. Not packed: rebuilt by unpack.
    ported: set[str] = field(default_factory=set)
    reservations: dict[str, HeldReservation] = field(default_factory=dict)  # reservation id -> it, oldest first
    books: Books = field(default_factory=Books)  # accounts, sharing settings, evictions under way

    def __post_init__(self) -> None:
        if not isinstance(self.placements, Placements):  # a plain dict (tests): indexed from here on
            self.placements = Placements(self.placements)


def validate_metadata(meta: pb.WorkerMetadata) -> str:
    """A reason to refuse this registration, or "" when it is acceptable."""
    if not meta.worker_id:
        return "worker_id is empty"
    if len(meta.worker_id) > 200 or any(c in meta.worker_id for c in "/\x00\n"):
        return f"worker_id {meta.worker_id!r} must be at most 200 characters without '/', NUL or newlines"
    cap = meta.capacity
    for name in ("cpu_millis", "memory_bytes", "gpus", "tpus"):
        if getattr(cap, name) < 0:
            return f"capacity.{name} is negative ({getattr(cap, name)})"
    if cap.cpu_millis == 0 and cap.memory_bytes == 0:
        return "capacity is empty: a worker needs some cpu or memory"
    for key, value in meta.attributes.items():
        if not key:
            return "attribute with an empty key"
        if value.WhichOneof("kind") is None:
            return f"attribute {key!r} has no value (supported: string, int, float, bool)"
    start, end = meta.port_range_start, meta.port_range_end
    if (start or end) and not 1 <= start <= end <= 65_535:
        return f"port range {start}-{end} is not within 1-65535 with start <= end"
    if meta.runtime and meta.runtime not in SUPPORTED_RUNTIMES:
        return f"runtime {meta.runtime!r} is not one of {', '.join(SUPPORTED_RUNTIMES)}"
    return ""


def committed(state: SchedulerState) -> dict[str, list[int]]:
    """Committed cpu, memory, gpus, tpus per worker (a copy the caller may add to), as the placements keep it."""
    return {worker_id: list(u) for worker_id, u in state.placements.used.items()}


def encode_snapshot(state: SchedulerState, now: float) -> bytes:
    """The scheduling activity's input: healthy workers' free capacity, the queue and sharing's part, zlib(protobuf).

    Encoded as the pass encodes it (workflows/snapshot_cache.py), from nothing.
    """
    from workflows.snapshot_cache import encode_snapshot as encode  # it builds on this module

    return encode(state, now)


def snapshot_parts(state: SchedulerState, now: float, most: int = SNAPSHOT_PART) -> Iterator[bytes]:
    """The snapshot from one walk over the whole state, in serialized parts: workers (`most` a part),
    sharing's part, the queue (`most` jobs a part) and reservations; the first part is empty.

    Serialized protobuf messages concatenate into their merge, so the parts joined are the snapshot.
    The pass builds its snapshot from cached pieces (workflows/snapshot_cache.py); this plain encoding
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
        )
        reason = state.pending_reasons.get(entry.job_id)
        if reason:
            sj.reason_crc = zlib.crc32(reason.encode())  # the activity sends back only reasons that changed
        sj.request.cpu_millis = spec.cpu_millis
        sj.request.memory_bytes = spec.memory_bytes
        sj.request.gpus = spec.gpus
        sj.request.tpus = spec.tpus
        for c in spec.constraints:
            sc = sj.constraints.add(key=c.key, op=c.op)
            if c.value is not None:
                set_attr(sc.value, c.value)
    reservation_state.encode(snap, state, now)
    yield snap.SerializeToString()


def worker_from_metadata(meta: pb.WorkerMetadata) -> WorkerEntry:
    cap = meta.capacity
    ports = (meta.port_range_start, meta.port_range_end) if meta.port_range_start else DEFAULT_PORT_RANGE
    return WorkerEntry(
        worker_id=meta.worker_id,
        session=meta.agent_session,
        cpu_millis=cap.cpu_millis,
        memory_bytes=cap.memory_bytes,
        gpus=cap.gpus,
        tpus=cap.tpus,
        attributes={k: get_attr(v) for k, v in meta.attributes.items()},
        runtime=meta.runtime or "process",
        host=meta.host,
        address=meta.address or meta.host or meta.worker_id,
        port_range=ports,
    )


def refusal(state: SchedulerState, meta: pb.WorkerMetadata) -> str:
    """Why this registration is refused, or "" when it is accepted."""
    reason = validate_metadata(meta)
    existing = state.workers.get(meta.worker_id)
    if not reason and existing is not None and existing.healthy and existing.session != meta.agent_session:
        cap = meta.capacity
        if (existing.cpu_millis, existing.memory_bytes, existing.gpus, existing.tpus) != (
            cap.cpu_millis, cap.memory_bytes, cap.gpus, cap.tpus
        ):
            reason = (
                f"worker_id {meta.worker_id!r} is already registered and healthy with different "
                "resources; stop the other agent or pick another id"
            )
    return reason
