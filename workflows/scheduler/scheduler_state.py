"""The scheduler workflow's state: its dataclasses and the scheduling snapshot.

Pure functions of the state (no Temporal calls), so they are unit-testable and
run the same inside the workflow and in tests. The packed form a run continues
as is in scheduler_carry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

from activities.contracts import DEFAULT_PORT_RANGE, Delivery
from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr, set_attr
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placements
from workflows.scheduler.reservation_state import HeldReservation
from workflows.scheduler.scheduler_actions import ActionRow, new_ring
from workflows.scheduler.sharing_state import Books

_WORKER_STATES: dict[str, WorkerState] = {state.value: state for state in WorkerState}


def _row_field(name: str, doc: str) -> Any:
    """A WorkerEntry attribute read from and written to its row."""

    def get(self: WorkerEntry) -> Any:
        return getattr(self.row, name)

    def put(self: WorkerEntry, value: Any) -> None:
        setattr(self.row, name, value)
        self._piece = None

    return property(get, put, doc=doc)


# What a pass's snapshot takes of a worker: its state, cordoned, suspect_until and worker_id (whether a pass may
# place there), and its row serialized. A plain tuple, made in C for a whole fleet at once (`pass_rows`).
PassRow = tuple[str, bool, float, str, bytes]
ROW_ID = itemgetter(3)  # a PassRow's worker_id
ROW_BYTES = itemgetter(4)  # a PassRow's serialized row
_ROW = attrgetter("row")
_PIECE = attrgetter("_piece")
_PASS_FIELDS = tuple(map(attrgetter, ("state", "cordoned", "suspect_until", "worker_id")))
_SERIALIZE = pb.WorkerRow.SerializeToString


def pass_rows(entries: Collection[WorkerEntry]) -> list[PassRow]:
    """Each worker as a pass's snapshot takes it, in order: kept by its entry until its row changes (every setter
    drops it), made again only for those. Reading four fields of 30,000 upb rows and serializing them took ~25 ms
    of every pass's snapshot, and few rows change between passes; a run's first pass makes them all, in C."""
    pieces: list[PassRow | None] = list(map(_PIECE, entries))
    if None not in pieces:
        return pieces  # type: ignore[return-value]  # none is None
    cold = [entry for entry, piece in zip(entries, pieces, strict=True) if piece is None]
    rows = list(map(_ROW, cold))
    made = zip(*(map(field, rows) for field in _PASS_FIELDS), map(_SERIALIZE, rows), strict=True)  # tuples made in C
    for entry, piece in zip(cold, made, strict=True):
        entry._piece = piece
    return list(map(_PIECE, entries))


class WorkerEntry:
    """A registered worker: a view of its `pb.WorkerRow`, the message the scheduler keeps and carries.

    A run's workers load as one parse of their rows (a view each), not as objects decoded field by field;
    the attributes are decoded when first read (a pass reads them only when a worker's shape is new to it).
    Its row changes only through the setters below, each of which drops the `PassRow` kept for the next
    snapshot (`pass_rows`): so a pass reads a worker's row from the upb message only after it changed.
    """

    __slots__ = ("_attributes", "_piece", "row")
    # Functions of the row, made when first read (iris/controller/query_guard.py)
    DERIVED = ("_attributes", "_piece")

    def __init__(
        self, worker_id: str, session: str, cpu_millis: int, memory_bytes: int, gpus: int, tpus: int,
        attributes: Mapping[str, Any], runtime: str = "process", state: WorkerState = WorkerState.READY,
        suspect_until: float = 0.0, dispatch_failures: int = 0, cordoned: bool = False, lost_at: float = 0.0,
        host: str = "", address: str = "", port_range: tuple[int, int] = DEFAULT_PORT_RANGE,
        heartbeat_timeout_seconds: float = 0.0,
    ) -> None:  # fmt: skip
        self.row = pb.WorkerRow(
            worker_id=worker_id, session=session, cpu_millis=cpu_millis, memory_bytes=memory_bytes, gpus=gpus,
            tpus=tpus, runtime=runtime, state=state, suspect_until=suspect_until, dispatch_failures=dispatch_failures,
            cordoned=cordoned, lost_at=lost_at, host=host, address=address, port_range_start=port_range[0],
            port_range_end=port_range[1], heartbeat_timeout_seconds=heartbeat_timeout_seconds,
        )  # fmt: skip
        ordered = dict(sorted(attributes.items()))  # a map's order on the wire is none: read back sorted
        for key, value in ordered.items():
            set_attr(self.row.attributes[key], value)
        self._attributes: dict[str, Any] | None = ordered
        self._piece: PassRow | None = None

    @classmethod
    def of(cls, row: pb.WorkerRow) -> WorkerEntry:
        """A view of a row as it is (a carried one: nothing copied, nothing decoded yet)."""
        entry = cls.__new__(cls)
        entry.row, entry._attributes, entry._piece = row, None, None
        return entry

    worker_id = _row_field("worker_id", "")
    session = _row_field("session", "its agent's liveness session")
    cpu_millis = _row_field("cpu_millis", "")
    memory_bytes = _row_field("memory_bytes", "")
    gpus = _row_field("gpus", "")
    tpus = _row_field("tpus", "")
    runtime = _row_field("runtime", "")
    suspect_until = _row_field("suspect_until", "workflow time; QUARANTINED until then")
    dispatch_failures = _row_field("dispatch_failures", "consecutive; doubles the quarantine")
    cordoned = _row_field("cordoned", "the operator's: no new work; running tasks go on (a draining slice)")
    lost_at = _row_field("lost_at", "workflow time it was reported lost; removed LOST_RETENTION later")
    host = _row_field("host", "the host name its agent registered with: a gang's coordinator address")
    address = _row_field("address", "how other hosts reach its tasks (its registered address, else its host name)")
    heartbeat_timeout_seconds = _row_field("heartbeat_timeout_seconds", "its agent's --heartbeat-timeout (0: default)")

    @property
    def state(self) -> WorkerState:
        """Moved only by worker_lifecycle's table. Looked up, not `WorkerState(...)`: an enum call is ~1 us, which a
        whole fleet's loss (30,000 hosts in one workflow task) paid twice a host."""
        state = _WORKER_STATES.get(self.row.state)
        if state is None:
            raise ValueError(f"worker {self.row.worker_id} has no lifecycle state {self.row.state!r}")
        return state

    @state.setter
    def state(self, value: WorkerState) -> None:
        self.row.state = value
        self._piece = None

    @property
    def port_range(self) -> tuple[int, int]:
        """The ports its tasks may be given."""
        return self.row.port_range_start, self.row.port_range_end

    @port_range.setter
    def port_range(self, value: tuple[int, int]) -> None:
        self.row.port_range_start, self.row.port_range_end = value
        self._piece = None

    @property
    def attributes(self) -> dict[str, Any]:
        """str | int | float | bool by key, in key order (read-only: a worker's attributes change by registering)."""
        if self._attributes is None:
            attributes = self.row.attributes
            self._attributes = {key: get_attr(attributes[key]) for key in sorted(attributes)}
        return self._attributes

    @property
    def healthy(self) -> bool:
        """Its liveness session is alive (READY or QUARANTINED)."""
        return self.row.state != WorkerState.LOST

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkerEntry) and self.row == other.row

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"WorkerEntry({self.worker_id!r}, state={self.row.state}, cordoned={self.cordoned})"


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
    # Answers owed (registrations' replies, evictions), sent by the loop (Deliveries.send_replies). Carried: a run
    # that hands over before sending them leaves them to the next, which sends them first.
    replies: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.placements, Placements):  # a plain dict (tests): indexed from here on
            self.placements = Placements(self.placements)


def committed(state: SchedulerState) -> dict[str, list[int]]:
    """Committed cpu, memory, gpus, tpus per worker (a copy the caller may add to), as the placements keep it."""
    return {worker_id: list(u) for worker_id, u in state.placements.used.items()}


def refusal(state: SchedulerState, row: pb.WorkerRow) -> str:
    """Why this host's row is refused, or "" when it is accepted: what only the scheduler can tell (its row
    was checked where it was declared, activities/contracts/worker_rows.py)."""
    existing = state.workers.get(row.worker_id)
    if existing is None or not existing.healthy or existing.session == row.session:
        return ""
    if (existing.cpu_millis, existing.memory_bytes, existing.gpus, existing.tpus) == (
        row.cpu_millis, row.memory_bytes, row.gpus, row.tpus
    ):
        return ""
    return (
        f"worker_id {row.worker_id!r} is already registered and healthy with different "
        "resources; stop the other agent or pick another id"
    )
