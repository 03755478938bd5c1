"""The autoscaler's side of `capacity: spot | on_demand | spot_then_on_demand` (deterministic: no I/O).

Why apart: the workflow module holds orchestration; this decides, from the group's config block and
what the group's record remembers (scheduler.spot), the capacity of the slice about to be made, and
notes a spot slice's preemption or stockout. A slice of a `spot_then_on_demand` group goes to its
platform with `capacity` set to the one chosen, so the platform need not know the rule.
"""

from __future__ import annotations

import dataclasses

from activities.contracts.fleet import QUOTA_EXHAUSTED, ScaleGroupSpec
from activities.contracts.fleet import SLICE_PREEMPTED as PREEMPTED
from scheduler.spot import Capacity, CapacityPolicy, Choice, choose, note_preemption, note_stockout
from workflows.fleet.autoscaler_state import GroupRuntime, SliceEntry

CAPACITY_KEYS = ("capacity", "spot", "spot_fallback")
CAPACITY_PLATFORMS = ("gcp",)  # platforms whose slices are spot or on-demand


def group_policy(spec: ScaleGroupSpec) -> CapacityPolicy | None:
    """The group's capacity rule; None for a platform without spot capacity (its config was checked at load)."""
    if spec.platform not in CAPACITY_PLATFORMS and not any(k in spec.settings for k in CAPACITY_KEYS):
        return None
    try:
        return CapacityPolicy.parse(spec.settings)
    except ValueError:  # refused when the config was loaded; never here
        return None


def slice_capacity(spec: ScaleGroupSpec, rt: GroupRuntime, now: float) -> tuple[ScaleGroupSpec, Choice | None]:
    """The spec to make the next slice with, and its capacity (None on a platform without one)."""
    policy = group_policy(spec)
    if policy is None:
        return spec, None
    choice = choose(policy, rt.spot, now)
    if policy.kind != Capacity.SPOT_THEN_ON_DEMAND:
        return spec, choice
    settings = {k: v for k, v in spec.settings.items() if k not in CAPACITY_KEYS}
    return dataclasses.replace(spec, settings={**settings, "capacity": choice.capacity.value}), choice


def note_lost(spec: ScaleGroupSpec, rt: GroupRuntime, entry: SliceEntry | None, error: str, error_type: str,
              now: float) -> bool:  # fmt: skip
    """A slice of the group failed or was lost: remember it when it was spot; True when new slices now go
    on-demand (a stockout then needs no back-off: the on-demand slice is asked for at once)."""
    if entry is None or entry.capacity != Capacity.SPOT.value:
        return False
    policy = group_policy(spec)
    if policy is None:
        return False
    if error_type == PREEMPTED:
        return note_preemption(policy, rt.spot, now)
    if error_type == QUOTA_EXHAUSTED:
        return note_stockout(policy, rt.spot, now, error)
    return False
