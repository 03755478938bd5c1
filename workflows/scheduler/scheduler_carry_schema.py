"""The header of the scheduler's continue-as-new carry (workflows/scheduler/scheduler_carry.py packs and loads it).

Written and read by the one message codec (activities/contracts/dataclass_json.py): a field is carried the
moment it is declared here, and a carry from a build with fewer fields reads with their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from activities.contracts import Delivery
from workflows.scheduler.reservation_state import HeldReservation
from workflows.scheduler.sharing_state import CarriedBooks


@dataclass
class CarryHeader:
    """The carry's first stream: what is neither placements, workers nor the queue (those are messages)."""

    store_url: str = ""
    actions: list[list[Any]] = field(default_factory=list)
    port_cursors: dict[str, int] = field(default_factory=dict)
    books: CarriedBooks = field(default_factory=CarriedBooks)
    reservations: list[HeldReservation] = field(default_factory=list)
    replies: list[Delivery] = field(default_factory=list)  # answers owed, each `arg` as its JSON
