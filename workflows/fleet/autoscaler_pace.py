"""How often the autoscaler looks: its pace, as a transition table (pure: no Temporal, no I/O).

         acted / slices moving                may change                 quiet
    ┌──────────────────────────▶ BUSY ◀──────────────────┐       ┌──────────────────▶ IDLE
    │  (any pace)                  │                       │       │  (any pace)
    │                              └── may change ──▶ WATCHING ◀───┘ may change

After each plan the autoscaler names what the plan saw (a `PlanOutcome`: it created or removed slices,
some slice is still booting or draining, a slice may change without a signal announcing it, or nothing
at all) and moves to the pace the table gives; the pace alone sets the next wait (`tick`). A plan that
failed names nothing: the pace stays. The table is memoryless on purpose: what to watch next depends on
the fleet the last plan saw, never on how the autoscaler got there, so a new run (continue-as-new starts
BUSY) settles at the right pace after one plan.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from workflows.lifecycle import Step, transition_function

BUSY_TICK = timedelta(seconds=2)  # while slices are on their way or going, or the last plan acted
IDLE_TICK = timedelta(minutes=1)  # nothing to watch: a backstop only (the scheduler wakes it for new demand)


class AutoscalerPace(StrEnum):
    BUSY = "BUSY"  # look every BUSY_TICK (at most the scan interval)
    WATCHING = "WATCHING"  # look every scan interval: a slice may change unannounced
    IDLE = "IDLE"  # look every IDLE_TICK (at least the scan interval): signals wake it for anything new


class PlanOutcome(StrEnum):
    ACTED = "acted"  # the plan created or removed slices
    SLICES_MOVING = "slices_moving"  # a slice is not READY: booting, bootstrapping or draining
    MAY_CHANGE = "may_change"  # a READY slice with work may go idle, or a spare of a buffered group be taken
    QUIET = "quiet"  # nothing can change unannounced


_TO = {
    PlanOutcome.ACTED: AutoscalerPace.BUSY,
    PlanOutcome.SLICES_MOVING: AutoscalerPace.BUSY,
    PlanOutcome.MAY_CHANGE: AutoscalerPace.WATCHING,
    PlanOutcome.QUIET: AutoscalerPace.IDLE,
}
TRANSITIONS: dict[tuple[AutoscalerPace, PlanOutcome], Step[AutoscalerPace, None]] = {
    (pace, outcome): Step(to) for pace in AutoscalerPace for outcome, to in _TO.items()
}
"""Every legal move: from any pace, each outcome leads to one pace."""

transition = transition_function(TRANSITIONS, "autoscaler at pace", AutoscalerPace)


def outcome(acted: bool, slices_moving: bool, may_change: bool) -> PlanOutcome:
    """What a plan saw, the first that holds of: it acted, a slice is moving, a slice may change unannounced."""
    if acted:
        return PlanOutcome.ACTED
    if slices_moving:
        return PlanOutcome.SLICES_MOVING
    return PlanOutcome.MAY_CHANGE if may_change else PlanOutcome.QUIET


def tick(pace: AutoscalerPace, scan: timedelta) -> timedelta:
    """How long the autoscaler waits for a signal before it looks again, at `pace` (scan: the config's interval)."""
    if pace is AutoscalerPace.BUSY:
        return min(BUSY_TICK, scan)
    return scan if pace is AutoscalerPace.WATCHING else max(scan, IDLE_TICK)


__all__ = ["BUSY_TICK", "IDLE_TICK", "TRANSITIONS", "AutoscalerPace", "PlanOutcome", "outcome", "tick", "transition"]
