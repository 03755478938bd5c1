"""The scheduler's data model: values that validate themselves at construction.

Everything here is plain, immutable and free of I/O so that the scheduling
function can run inside a deterministic Temporal activity and in isolation.
Resources are integers (cpu in millicores, memory in bytes) so that capacity
arithmetic is exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

AttrValue = str | int | float | bool

# The wire's integer fields (activities/proto/cluster.proto): cpu_millis, memory_bytes and attribute and constraint
# values are int64, gpus / tpus int32. A bigger value passed here would fail at encoding with protobuf's
# "Value out of range", naming no field, or, inside an agent, stop it at start.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def int64_refusal(value: object) -> str:
    """Why an attribute or constraint value does not fit the wire's int64, or "" when it does (or is no int)."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return f"an integer must be between {INT64_MIN} and {INT64_MAX}, got {value}"
    return ""

TAINT_PREFIX = "taint:"

# Attribute keys travel as `--attribute K=V` and appear in constraint expressions, so no
# '=', '!', '<', '>' or whitespace; ':' is allowed for taints ("taint:preemptible").
_ATTRIBUTE_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$")
ATTRIBUTE_KEY_RULE = "letters, digits and '_.:/-' (e.g. 'tpu-name', 'taint:preemptible')"


def is_attribute_key(value: object) -> bool:
    """Whether `value` may name a worker attribute: one rule for the config's keys and constraints' keys,
    so a constraint can only name a key a worker could have."""
    return isinstance(value, str) and _ATTRIBUTE_KEY_RE.match(value) is not None


class Op(StrEnum):
    """Constraint operators; ordering ops compare numbers with numbers, strings with strings."""

    EQ = "EQ"
    NE = "NE"
    EXISTS = "EXISTS"
    NOT_EXISTS = "NOT_EXISTS"
    GT = "GT"
    GE = "GE"
    LT = "LT"
    LE = "LE"
    IN = "IN"  # the attribute equals one of a list of values
    NOT_IN = "NOT_IN"  # the attribute is present and equals none of them


# An operator by its name or itself (a member hashes and compares as its name): construction's lookup,
# cheaper than calling the enum (constraints are built for every job of every snapshot).
_OPS: Mapping[str, Op] = {op.value: op for op in Op}


class Band(StrEnum):
    """Priority bands, highest first: production > interactive > batch (the default is interactive)."""

    PRODUCTION = "production"
    INTERACTIVE = "interactive"
    BATCH = "batch"


# Higher rank goes first and may evict strictly lower ranks.
BAND_RANK: Mapping[str, int] = {Band.PRODUCTION: 2, Band.INTERACTIVE: 1, Band.BATCH: 0}
DEFAULT_BAND = Band.INTERACTIVE


def parse_band(value: object, field_name: str = "priority") -> Band:
    """Normalize a band name ("Batch" -> Band.BATCH); a clear ValueError names the field otherwise."""
    if isinstance(value, str):
        try:
            return Band(value.strip().lower())
        except ValueError:
            pass
    choices = ", ".join(band.value for band in Band)
    raise ValueError(f"{field_name} must be one of {choices}, got {value!r}")


UNARY_OPS = frozenset({Op.EXISTS, Op.NOT_EXISTS})
ORDERING_OPS = frozenset({Op.GT, Op.GE, Op.LT, Op.LE})
SET_OPS = frozenset({Op.IN, Op.NOT_IN})

_KIND_NAMES = {"b": "booleans", "n": "numbers", "s": "strings"}


# The kind of a value of exactly these types, looked up instead of tested: a pass asks it for every
# attribute of every worker (`value_kind`; a subclass, such as an IntEnum, is tested).
KIND_OF_TYPE: Mapping[type, str] = {bool: "b", int: "n", float: "n", str: "s"}


def value_kind(value: object) -> str:
    """Return "b", "n" or "s": the comparison kind of an attribute value (bool is not a number)."""
    kind = KIND_OF_TYPE.get(value.__class__)
    if kind is not None:
        return kind
    if isinstance(value, bool):
        return "b"
    if isinstance(value, (int, float)):
        return "n"
    return "s"


def _value_list(key: str, op: Op, value: object) -> tuple[AttrValue, ...]:
    """Check and normalize the values of an IN / NOT_IN constraint: a non-empty list of one kind, no repeats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(
            f"constraint {key} {op} needs a list of values, e.g. Constraint({key!r}, {str(op)!r}, ['a', 'b']), "
            f"got {value!r}"
        )
    items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
    if not items:
        raise ValueError(f"constraint {key} {op} needs at least one value, got an empty list")
    out: list[AttrValue] = []
    seen: set[tuple[str, AttrValue]] = set()
    kinds: set[str] = set()
    for item in items:
        if not isinstance(item, (str, int, float, bool)):
            raise ValueError(
                f"constraint values for {key!r} must be str, int, float or bool, got {type(item).__name__}"
            )
        if too_big := int64_refusal(item):
            raise ValueError(f"constraint values for {key!r}: {too_big}")
        kind = value_kind(item)
        ident = (kind, item)
        if ident not in seen:
            seen.add(ident)
            kinds.add(kind)
            out.append(item)
    if len(kinds) > 1:
        shown = " and ".join(_KIND_NAMES[k] for k in sorted(kinds))
        raise ValueError(f"constraint values for {key!r} must all be of one type, got {shown}: {value!r}")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Resources:
    """A resource vector; also used for free capacity. cpu is in millicores."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    tpus: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu_millis", "memory_bytes", "gpus", "tpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def fits_in(self, free: Resources) -> bool:
        return (
            self.cpu_millis <= free.cpu_millis
            and self.memory_bytes <= free.memory_bytes
            and self.gpus <= free.gpus
            and self.tpus <= free.tpus
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millis + other.cpu_millis,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
            self.tpus + other.tpus,
        )

    def __sub__(self, other: Resources) -> Resources:
        """Subtract, clamping at zero (capacity is never negative)."""
        return Resources(
            max(0, self.cpu_millis - other.cpu_millis),
            max(0, self.memory_bytes - other.memory_bytes),
            max(0, self.gpus - other.gpus),
            max(0, self.tpus - other.tpus),
        )


@dataclass(frozen=True, slots=True)
class Constraint:
    """One requirement on a worker attribute, e.g. Constraint("tpu-topology", Op.EQ, "v5e-16").

    IN / NOT_IN take a list of values of one type (`Constraint("zone", "IN", ["a", "b"])`), kept as
    a tuple. `soft=True` makes it a preference: workers that meet it are chosen first when any has
    room, and the job still runs where it does not hold (the pass carries soft constraints as
    `PendingJob.preferences`, never as requirements).
    """

    key: str
    op: Op | str  # a string is accepted and normalized to Op at construction
    # IN / NOT_IN: a list is accepted and kept as a tuple (the list type is only for callers)
    value: AttrValue | tuple[AttrValue, ...] | list[AttrValue] | None = None
    soft: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"constraint key must be a non-empty string, got {self.key!r}")
        if not is_attribute_key(self.key):
            # A key no worker can have ("zone in", "my key") would keep the job pending forever.
            raise ValueError(f"constraint key must be {ATTRIBUTE_KEY_RULE}, got {self.key!r}")
        op = _OPS.get(self.op) if isinstance(self.op, str) else None
        if op is None:
            raise ValueError(f"constraint op for {self.key!r} must be one of {', '.join(Op)}, got {self.op!r}")
        object.__setattr__(self, "op", op)
        if not isinstance(self.soft, bool):
            raise ValueError(f"constraint soft for {self.key!r} must be True or False, got {self.soft!r}")
        if op in UNARY_OPS:
            if self.value is not None:
                raise ValueError(f"constraint {self.key} {op} takes no value, got {self.value!r}")
            return
        if self.value is None:
            raise ValueError(f"constraint {self.key} {op} needs a value")
        if op in SET_OPS:
            object.__setattr__(self, "value", _value_list(self.key, op, self.value))
            return
        if isinstance(self.value, (list, tuple, set, frozenset)):
            raise ValueError(f"constraint value for {self.key!r}: a list of values needs op IN or NOT_IN, not {op}")
        if not isinstance(self.value, (str, int, float, bool)):
            raise ValueError(
                f"constraint value for {self.key!r} must be str, int, float or bool, "
                f"got {type(self.value).__name__}"
            )
        if too_big := int64_refusal(self.value):
            raise ValueError(f"constraint value for {self.key!r}: {too_big}")
        if op in ORDERING_OPS and (isinstance(self.value, bool) or not isinstance(self.value, (int, float))):
            raise ValueError(
                f"constraint {self.key} {op} needs a number, got {self.value!r}: "
                "ordering operators compare numeric attributes only"
            )

    @classmethod
    def stored(cls, key: str, op: Op | str, value: object = None, soft: bool = False) -> Constraint:
        """A constraint on a key the scheduler read from the store or the fleet (a job's request, a worker's taint).

        Checked like any other, except that a key outside the attribute-key rule is kept as it is rather than
        refused: a job stored before keys were checked, or a worker started by hand with such an attribute,
        must not stop every scheduling pass. Such a key is one no (other) worker has, as before.
        """
        try:
            return cls(key, op, value, soft)  # type: ignore[arg-type]  # any value: __post_init__ checks it
        except ValueError:
            if is_attribute_key(key) or not isinstance(key, str) or not key:
                raise
        built = cls("_", op, value, soft)  # type: ignore[arg-type]
        object.__setattr__(built, "key", key)
        return built

    def required(self) -> Constraint:
        """The same constraint as a requirement (soft=False): how a pass evaluates a preference."""
        return Constraint(self.key, self.op, self.value) if self.soft else self


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """A healthy worker as the scheduler sees it: its id, free capacity and typed attributes.

    `capacity` is the worker's total capacity when the caller knows it. It only
    lets the scheduler tell a partially used group (some capacity already taken)
    from an untouched one, so that plain tasks fill used groups first; None means
    unknown and is treated as "nothing running yet".
    """

    worker_id: str
    free: Resources
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    capacity: Resources | None = None


@dataclass(frozen=True, slots=True)
class PendingJob:
    """The pending tasks of one job, in queue order. All tasks share one request.

    `task_indices` are the job's tasks still waiting (a coscheduled job is placed
    only when all of them fit in one group). `waited_seconds` is how long the job
    has waited; when `scheduling_timeout_seconds` is set and exceeded, its tasks
    are reported as timed out instead of being placed. `tolerations` names the
    taints (without the `taint:` prefix) the job accepts.

    `band` is the band the job asked for and `user` whose job it is; with a
    `ShareSnapshot` the pass demotes a user without credits to batch and orders
    users inside a band by fair share. `priority` is the older integer, kept
    only as a tie-break inside a band until every caller sends bands.

    `num_groups` > 1 makes a gang multi-slice: its tasks are split evenly over
    that many distinct groups, all placed at once or none (`scheduler.multislice`).

    `max_concurrent` > 0 caps how many of the job's tasks are placed at once (a throttled array):
    `placed` of them are placed now, so a pass places at most `max_concurrent - placed` more
    (`scheduler.throttle`). Never set on a gang (refused at submission).
    `preferences` are the job's soft constraints: the pass tries workers (or, for a gang,
    groups) meeting all of them first, then all but the last, and so on, and at last any
    feasible worker (`scheduler.preferences`). They never filter, never appear in a
    pending reason and do not change what the autoscaler or preemption consider.
    """

    job_id: str
    task_indices: tuple[int, ...]
    request: Resources
    constraints: tuple[Constraint, ...] = ()
    group_by: str | None = None
    priority: int = 0
    waited_seconds: float = 0.0
    scheduling_timeout_seconds: float | None = None
    tolerations: frozenset[str] = frozenset()
    band: Band = DEFAULT_BAND  # parsed at the boundary (parse_band): no __post_init__ on 100k jobs a pass
    user: str = ""
    num_groups: int = 1  # checked at the boundary (submission); only meaningful with group_by
    max_concurrent: int = 0  # 0 = no cap
    placed: int = 0  # the job's tasks placed now (read only with max_concurrent)
    # A throttled array whose cap had room again since it was submitted (one of its tasks left its place): how
    # long it has waited since. Its cap, not the fleet, held it back before that (`timeout_wait`).
    room_waited_seconds: float | None = None
    # Soft constraints (preferences), in the order given; `constraints` holds only hard ones. Built
    # by `scheduler.attributes.split_soft` at the boundary. Earlier preferences weigh more.
    preferences: tuple[Constraint, ...] = ()

    def timeout_wait(self) -> float:
        """How long the job has waited for a place, as `scheduling_timeout_seconds` counts: for a throttled array,
        the time its own cap held its tasks back is not waiting for the fleet."""
        return self.waited_seconds if self.room_waited_seconds is None else self.room_waited_seconds


class Assignment(NamedTuple):
    """A proposed placement; the caller commits it.

    A named tuple, not a dataclass: a pass makes one per task it places (100,000 at fleet scale), built in C
    from a job's columns (`scheduler.placement._emit`), and the plan's encoder reads them as rows.
    """

    job_id: str
    task_index: int
    worker_id: str


@dataclass(frozen=True, slots=True)
class Eviction:
    """Running tasks of `job_id` to stop so that `preemptor` can run; the caller carries it out.

    A coscheduled victim is always listed whole (every running task of the
    gang). The preemptor's assignments are in the same plan and may start only
    once these tasks have released their workers.
    """

    job_id: str
    task_indices: tuple[int, ...]
    band: Band
    preemptor: str
    reason: str


@dataclass(frozen=True, slots=True)
class SchedulingResult:
    """The plan of one pass.

    `pending_reasons` has a short, user-readable reason for every job with tasks
    left unplaced in this pass (and not timed out), and for every preemptor,
    which is placed but waits for its evictions ("evicting 2 batch tasks of
    ana/sweep-3"), and for every job of a reservation's tree left waiting.
    `effective_bands` gives, with a ShareSnapshot, the band each
    pending job was scheduled in (batch for a user without credits).
    """

    assignments: tuple[Assignment, ...] = ()
    timed_out: tuple[tuple[str, int], ...] = ()  # (job_id, task_index)
    pending_reasons: Mapping[str, str] = field(default_factory=dict)
    evictions: tuple[Eviction, ...] = ()
    effective_bands: Mapping[str, Band] = field(default_factory=dict)
    # Reservations (scheduler.reservations): entries held in this pass, (entry index, worker id) per
    # reservation id, and why each reservation with an entry still missing waits.
    reservation_holds: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    reservation_reasons: Mapping[str, str] = field(default_factory=dict)
    # The jobs left waiting (with a pending reason) in the order the pass tried them: the queue's positions.
    queue: tuple[str, ...] = ()
