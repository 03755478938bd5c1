"""The scheduler bench's tools: inputs generated at fleet scale (`gen`), a first-fit reference (`baseline`),
the validity check of an output (`validate`), Iris against the reference (`compare`) and the timed comparisons
of constraints, multi-slice gangs, sharing, teams and reservations. What they time is one pass as
`python -m scheduler.bench INPUT.json OUTPUT.json` runs it (shared/spec/scheduler-bench.md): the scheduler's
own runner, which stays beside the scheduler."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def paired_ratio(base: Sequence[float], other: Sequence[float]) -> float:
    """The median of `other[i] / base[i]`: each pair ran back to back, so a change in the machine's speed
    (another process, a busy host under a virtual machine) falls on both of a pair and cancels in its
    ratio, where the best or the median of each side alone can come from different moments."""
    return statistics.median(o / b for b, o in zip(base, other, strict=True))


def pair_order(repeat: int) -> tuple[bool, bool]:
    """The order of a pair's two passes (False: the base first): alternating, so neither always runs second."""
    return (False, True) if repeat % 2 == 0 else (True, False)
