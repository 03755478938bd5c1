"""Soft constraints (preferences): where a job would rather run, never where it must.

A job's soft constraints (`PendingJob.preferences`, in the order given) rank the workers its hard
constraints allow; they never exclude one. The rule, one tier at a time:

1. workers (for a gang: a group with enough of them) meeting *all* its preferences,
2. then all but the last preference, then all but the last two, ...,
3. at last any feasible worker, through the ordinary pipeline (`scheduler.scheduling`), which
   evicts, reserves for a starving job and writes the pending reason from the hard constraints
   alone: a pending reason never names a preference.

So a task lands on a worker that meets its preferences whenever one with room exists, earlier
preferences weigh more than later ones, and a job whose preferences no worker meets runs like a
job without them. Inside a tier the usual order holds (best fit, groups kept whole for gangs).

Each tier is an ordinary `Feasibility` (hard constraints, taints and a prefix of the preferences,
made hard), so it uses the class cache like any constraint list: evaluated once per worker class
unless a constraint names a unique key, cached per pass, its buckets shared by every job with the
same tier. A tier with the same worker classes as the next wider one is dropped (a preference that
every feasible worker meets costs no second walk). A job without preferences never comes here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler import multislice
from scheduler.attributes import evaluate
from scheduler.placement import Feasibility, PassState
from scheduler.types import AttrValue, Constraint, PendingJob


def tiers(state: PassState, job: PendingJob, base: Feasibility) -> list[Feasibility]:
    """The job's preference tiers over `base` (its hard feasibility), most preferred first; cached per pass."""
    cache = state.preference_tiers
    key = (id(job.preferences), id(base))
    found = cache.get(key)
    if found is None:
        wanted = [c.required() for c in job.preferences]
        kept: list[Feasibility] = []
        wider = base.classes
        for n in range(1, len(wanted) + 1):  # from the widest tier to the narrowest
            tier = state.feasibility_of((*base.constraints, *wanted[:n]))
            if tier.classes is not None and tier.classes == wider:
                continue  # the same workers as the wider tier (a subset with equal classes): nothing to prefer
            kept.append(tier)
            wider = tier.classes
        found = cache[key] = kept[::-1]
    return found


def place_plain(state: PassState, job: PendingJob, base: Feasibility) -> int:
    """Place what fits of a plain job on its preferred tiers, best first; return the tasks placed."""
    total = len(job.task_indices)
    placed = 0
    for tier in tiers(state, job, base):
        placed = state.place_plain(job, state.plain_bucket(tier, job.request), placed)
        if placed == total:
            break
    return placed


def place_gang(state: PassState, job: PendingJob, base: Feasibility) -> bool:
    """Place a gang whole on the most preferred tier where a group (k groups, multi-slice) takes it."""
    for tier in tiers(state, job, base):
        bucket = state.gang_bucket(job, tier)
        if multislice.place(state, job, bucket) if job.num_groups > 1 else state.place_gang(job, bucket):
            return True
    return False


def rank(preferences: Sequence[Constraint], attributes: Mapping[str, AttrValue]) -> int:
    """How many of the preferences, from the first, hold on a worker: its tier (higher is better)."""
    for position, constraint in enumerate(preferences):
        if not evaluate(constraint, attributes):
            return position
    return len(preferences)


__all__ = ["place_gang", "place_plain", "rank", "tiers"]
