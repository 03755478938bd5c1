"""The scheduler workflow's state: its dataclasses and the scheduling snapshot.

Pure functions of the state (no Temporal calls), so they are unit-testable and
run the same inside the workflow and in tests. The packed form a run continues
as is in scheduler_carry.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from activities.contracts import DEFAULT_PORT_RANGE, MAX_HEARTBEAT_TIMEOUT_SECONDS, MIN_HEARTBEAT_TIMEOUT_SECONDS
from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placements
from workflows.scheduler.reservation_state import HeldReservation
from workflows.scheduler.scheduler_actions import ActionRow, new_ring
from workflows.scheduler.sharing_state import Books

SUPPORTED_RUNTIMES = ("process", "docker", "containerd")


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
    heartbeat_timeout_seconds: float = 0.0  # its agent's --heartbeat-timeout (0: an older agent, the default)

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
    room_at: float = 0.0  # a throttled array: when one of its tasks last left its place (its cap had room again)


@dataclass
class SchedulerState:
    store_url: str = ""
    workers: dict[str, WorkerEntry] = field(default_factory=dict)
    pending: dict[str, PendingEntry] = field(default_factory=dict)  # FIFO by submission (scheduler_queue)
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
    timeout = meta.heartbeat_timeout_seconds
    if timeout and not MIN_HEARTBEAT_TIMEOUT_SECONDS <= timeout <= MAX_HEARTBEAT_TIMEOUT_SECONDS:
        return (f"heartbeat_timeout_seconds {timeout:g} is not within {MIN_HEARTBEAT_TIMEOUT_SECONDS:g}-"
                f"{MAX_HEARTBEAT_TIMEOUT_SECONDS:g}")  # fmt: skip
    if meta.runtime and meta.runtime not in SUPPORTED_RUNTIMES:
        return f"runtime {meta.runtime!r} is not one of {', '.join(SUPPORTED_RUNTIMES)}"
    return ""


def committed(state: SchedulerState) -> dict[str, list[int]]:
    """Committed cpu, memory, gpus, tpus per worker (a copy the caller may add to), as the placements keep it."""
    return {worker_id: list(u) for worker_id, u in state.placements.used.items()}


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
        heartbeat_timeout_seconds=meta.heartbeat_timeout_seconds,
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
