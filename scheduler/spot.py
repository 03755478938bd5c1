"""Which capacity a scale group's next slice is on: spot, on-demand, or spot with a fallback.

Why: spot slices cost a fraction of on-demand ones, but a group the cloud keeps taking back makes
no progress. `capacity: spot_then_on_demand` asks for spot until `spot_fallback.after_preemptions`
of the group's spot slices were preempted within `spot_fallback.within` (or spot is stocked out in
every zone), then for on-demand slices during `spot_fallback.hold`, then for spot again.

Pure: the group's record of preemptions and its fallback are values the autoscaler workflow keeps
(durable, replayed); times are the workflow's clock, passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Capacity(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    SPOT_THEN_ON_DEMAND = "spot_then_on_demand"  # a group's policy, never one slice's capacity


CAPACITY_ATTRIBUTE = "capacity"  # a worker's attribute: the capacity its host is on (spot or on_demand)
DEFAULT_AFTER_PREEMPTIONS = 2
DEFAULT_WITHIN_SECONDS = 3600.0
DEFAULT_HOLD_SECONDS = 7200.0
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def duration_seconds(value: object, field_name: str) -> float:
    """Seconds from a number or "90s", "30m", "1h", "1h30m"; ValueError naming `field_name` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{field_name}: expected a duration like '30m' or '1h', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"{field_name}: cannot parse {value!r}; use a duration like '30m', '1h', '2h30m'")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError(f"{field_name}: expected a duration like '30m' or '1h', got {value!r}")
    if seconds <= 0:
        raise ValueError(f"{field_name}: must be more than 0, got {value!r}")
    return seconds


def words(seconds: float) -> str:
    """A duration as people write it: 45s, 30m, 1h, 1h30m."""
    s = int(seconds)
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 60}m" if s % 60 == 0 and s >= 60 else f"{s}s"


@dataclass(frozen=True)
class SpotFallback:
    """`spot_fallback:` of a group: after how many preemptions within how long, on-demand for how long."""

    after_preemptions: int = DEFAULT_AFTER_PREEMPTIONS
    within_seconds: float = DEFAULT_WITHIN_SECONDS
    hold_seconds: float = DEFAULT_HOLD_SECONDS

    def __post_init__(self) -> None:
        if isinstance(self.after_preemptions, bool) or not isinstance(self.after_preemptions, int):
            raise ValueError(f"spot_fallback.after_preemptions: must be an integer, got {self.after_preemptions!r}")
        if self.after_preemptions < 1:
            raise ValueError(f"spot_fallback.after_preemptions: must be at least 1, got {self.after_preemptions}")
        if self.within_seconds <= 0 or self.hold_seconds <= 0:
            raise ValueError("spot_fallback.within and spot_fallback.hold must be more than 0")

    @classmethod
    def parse(cls, block: object) -> SpotFallback:
        """From the config block (`{after_preemptions: 2, within: 1h, hold: 2h}`); None or {} is the defaults."""
        if block is None:
            return cls()
        if not isinstance(block, Mapping):
            raise ValueError(f"spot_fallback: must be a mapping, got {type(block).__name__}")
        unknown = set(block) - {"after_preemptions", "within", "hold"}
        if unknown:
            known = "after_preemptions, within, hold"
            raise ValueError(f"spot_fallback.{sorted(unknown)[0]}: unknown key (known: {known})")
        return cls(
            after_preemptions=block.get("after_preemptions", DEFAULT_AFTER_PREEMPTIONS),
            within_seconds=duration_seconds(block.get("within", DEFAULT_WITHIN_SECONDS), "spot_fallback.within"),
            hold_seconds=duration_seconds(block.get("hold", DEFAULT_HOLD_SECONDS), "spot_fallback.hold"),
        )


@dataclass(frozen=True)
class CapacityPolicy:
    """A group's capacity: on-demand, spot, or spot with the fallback rule."""

    kind: Capacity = Capacity.ON_DEMAND
    fallback: SpotFallback = field(default_factory=SpotFallback)

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> CapacityPolicy:
        """From a platform block's `capacity`, `spot` (a synonym of `capacity: spot`) and `spot_fallback`."""
        raw, spot = settings.get("capacity"), settings.get("spot")
        if spot is not None and not isinstance(spot, bool):
            raise ValueError(f"spot: must be true or false, got {spot!r}")
        if raw is None:
            kind = Capacity.SPOT if spot else Capacity.ON_DEMAND
        else:
            try:
                kind = Capacity(str(raw).replace("-", "_"))
            except ValueError:
                known = ", ".join(c.value for c in Capacity)
                raise ValueError(f"capacity: must be one of {known}, got {raw!r}") from None
            if spot is not None and spot != (kind != Capacity.ON_DEMAND):
                raise ValueError(f"spot: {str(spot).lower()} contradicts capacity: {kind.value} (give one of them)")
        if settings.get("spot_fallback") is not None and kind != Capacity.SPOT_THEN_ON_DEMAND:
            raise ValueError("spot_fallback: only with capacity: spot_then_on_demand")
        return cls(kind, SpotFallback.parse(settings.get("spot_fallback")))


@dataclass
class FallbackRecord:
    """What a group's fallback rule remembers: recent spot preemptions, and an on-demand hold if one runs."""

    preempted_at: list[float] = field(default_factory=list)  # the group's spot slices lost, within `within`
    until: float | None = None  # on-demand until then
    reason: str = ""  # why (e.g. "2 spot slices preempted within 1h")


@dataclass(frozen=True)
class Choice:
    """The capacity of the next slice and, for an on-demand slice of a spot group, why."""

    capacity: Capacity
    reason: str = ""


def note_preemption(policy: CapacityPolicy, record: FallbackRecord, now: float) -> bool:
    """A spot slice of the group was preempted at `now`; True when that starts an on-demand hold."""
    rule = policy.fallback
    record.preempted_at = [t for t in record.preempted_at if now - t < rule.within_seconds] + [now]
    if policy.kind != Capacity.SPOT_THEN_ON_DEMAND or len(record.preempted_at) < rule.after_preemptions:
        return False
    count = len(record.preempted_at)
    record.until = now + rule.hold_seconds
    record.reason = f"{count} spot slices preempted within {words(rule.within_seconds)}"
    record.preempted_at = []
    return True


def note_stockout(policy: CapacityPolicy, record: FallbackRecord, now: float, error: str) -> bool:
    """A spot slice could not be made in any zone (stockout or quota); True when that starts an on-demand hold."""
    if policy.kind != Capacity.SPOT_THEN_ON_DEMAND:
        return False
    record.until = now + policy.fallback.hold_seconds
    record.reason = f"spot stocked out in every zone: {error}"
    return True


def choose(policy: CapacityPolicy, record: FallbackRecord, now: float) -> Choice:
    """The capacity of a slice the group makes at `now`."""
    if policy.kind != Capacity.SPOT_THEN_ON_DEMAND:
        return Choice(policy.kind)
    if record.until is not None and now < record.until:
        return Choice(Capacity.ON_DEMAND, f"spot fallback: {record.reason}")
    if record.until is not None:  # the hold is over: spot again, with a clean slate
        record.until, record.reason = None, ""
    return Choice(Capacity.SPOT)
