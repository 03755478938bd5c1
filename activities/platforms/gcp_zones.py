"""Which zones of a multi-zone `gcp` group to try, and for how long a stocked-out zone is skipped.

A zone that answers a create with a stockout or quota refusal is skipped for a back-off
(`zone_backoff`, doubling on each refusal in a row, at most 8 times it); a create that
succeeds there clears it. The record is the controller process's own memory, kept per
project and scope (the platform's: its accelerator type and a fingerprint of its block, since a
stockout is per type and zone, and a changed block starts afresh): a restarted controller tries
each zone once more, which costs one refused create.
Pure bookkeeping, with the clock passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_DOUBLINGS = 3  # back-off at most 8x the first


@dataclass
class _Exhausted:
    until: float
    refusals: int
    reason: str


class ZoneBackoff:
    """Stocked-out zones by (project, scope, zone); thread-safe (activities run in threads)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._zones: dict[tuple[str, str, str], _Exhausted] = {}

    def usable(self, project: str, scope: str, zones: Sequence[str]) -> list[str]:
        """The zones to try now, in the configured order (those not backing off)."""
        now = self._clock()
        with self._lock:
            backing_off = {z for z in zones if (e := self._zones.get((project, scope, z))) and now < e.until}
        return [z for z in zones if z not in backing_off]

    def skipped(self, project: str, scope: str, zones: Sequence[str]) -> list[str]:
        """Why each zone backing off is skipped: `zone (reason; N s left)`."""
        now = self._clock()
        with self._lock:
            out = []
            for z in zones:
                e = self._zones.get((project, scope, z))
                if e is not None and now < e.until:
                    out.append(f"{z} skipped for {e.until - now:.0f} s more ({e.reason})")
            return out

    def exhausted(self, project: str, scope: str, zone: str, reason: str, first: float) -> float:
        """Record a stockout/quota refusal in `zone`; the back-off it starts, in seconds."""
        key = (project, scope, zone)
        with self._lock:
            previous = self._zones.get(key)
            refusals = (previous.refusals if previous else 0) + 1
            delay = first * 2 ** min(refusals - 1, MAX_DOUBLINGS)
            self._zones[key] = _Exhausted(self._clock() + delay, refusals, reason)
            return delay

    def succeeded(self, project: str, scope: str, zone: str) -> None:
        """A create worked in `zone`: it has capacity again."""
        with self._lock:
            self._zones.pop((project, scope, zone), None)
