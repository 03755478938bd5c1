"""The messages of the scheduler's continue-as-new carry (workflows/scheduler/scheduler_carry.py packs and loads them).

Written and read by the one message codec (activities/contracts/dataclass_json.py): a field is carried the
moment it is declared here, and a carry from a build with fewer fields reads with their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workflows.scheduler.reservation_state import HeldReservation
from workflows.scheduler.scheduler_state import PendingEntry, WorkerEntry
from workflows.scheduler.sharing_state import CarriedBooks


@dataclass
class CarryChunk:
    """One line of the carry: workers, and queued jobs (a long one split over chunks: its attempts add up)
    with why they wait. The last chunk (`changes`) holds what changed while the others
    were packed: what is gone first, then what was added or replaced (a queued job's attempts replaced,
    in its place)."""

    weight: int
    workers: list[WorkerEntry] = field(default_factory=list)
    queued: list[PendingEntry] = field(default_factory=list)
    changes: bool = False
    queued_gone: list[str] = field(default_factory=list)
    workers_gone: list[str] = field(default_factory=list)
    worker_order: list[str] = field(default_factory=list)  # set when the run reordered its workers meanwhile
    reasons: dict[str, str] = field(default_factory=dict)  # job id -> why it waits (the last pass's reason)
    reasons_gone: list[str] = field(default_factory=list)


@dataclass
class CarryHeader:
    """The carry's first line: what is not chunked, and what `summary` answers while the rest loads."""

    step: int
    weight: int
    # Healthy and all workers, pending and running tasks.
    counts: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    store_url: str = ""
    reasons: dict[str, str] = field(default_factory=dict)  # only from a build before: now with the queued jobs
    actions: list[list[Any]] = field(default_factory=list)
    port_cursors: dict[str, int] = field(default_factory=dict)
    books: CarriedBooks = field(default_factory=CarriedBooks)
    reservations: list[HeldReservation] = field(default_factory=list)
    # The placements follow in a stream of their own (a carry before placed them in the chunks: refused).
    placements_stream: bool = False
