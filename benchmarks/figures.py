"""What both sides of the bench measure, in the same units: latency samples and a throughput run.

Raw Temporal and Iris are compared figure by figure, so both produce `Latency` and
`Throughput` values, and both time their throughput run with the same `timed_gather`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.host import CpuMeter

_T = TypeVar("_T")

WARMUP_SAMPLES = 2
"""Latency samples per side taken and thrown away first (connections, caches, first workflow tasks)."""
SETTLE_SECONDS = 12.0
"""Quiet time before each throughput run. The server fires a timer for each workflow task ~10 s after
it (its timeouts), so without the pause each run pays for the timers of the run before it."""


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be between 0 and 100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Latency:
    """Sequential latency samples in seconds, summarized."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The 50th percentile."""
        return percentile(self.samples, 50)

    @property
    def p90(self) -> float:
        """The 90th percentile."""
        return percentile(self.samples, 90)

    def summary(self) -> dict[str, Any]:
        """Median, p90, min, max and the samples, for `--json`."""
        return {
            "median_s": self.median,
            "p90_s": self.p90,
            "min_s": min(self.samples),
            "max_s": max(self.samples),
            "samples_s": list(self.samples),
        }


@dataclass(frozen=True)
class Throughput:
    """`count` units started at once, all finished after `elapsed` seconds."""

    count: int
    elapsed: float
    accepted: float
    """Seconds until every start/submit call had returned."""
    cpu: dict[str, float] = field(default_factory=dict, compare=False)
    """CPU seconds per process during the run (see CpuMeter)."""
    started_at: float = 0.0
    """Wall-clock time of the first start/submit call."""
    ended_at: float = 0.0
    """Wall-clock time the last unit was seen finished."""
    workflow_tasks: dict[str, int] = field(default_factory=dict, compare=False)
    """Workflow tasks completed during the run, per kind of workflow (see `history.count_history`)."""
    events: dict[str, int] = field(default_factory=dict, compare=False)
    """History events written during the run, per kind of workflow."""

    @property
    def rate(self) -> float:
        """Units per second, start of the first to end of the last."""
        return self.count / self.elapsed

    def add_history(self, counts: tuple[Mapping[str, int], Mapping[str, int]]) -> None:
        """Record (workflow tasks, events) per kind of workflow, as `history.count_histories` returns them."""
        tasks, events = counts
        self.workflow_tasks.update(tasks)
        self.events.update(events)

    def summary(self) -> dict[str, Any]:
        """The figures for `--json`."""
        return {
            "count": self.count,
            "elapsed_s": self.elapsed,
            "accepted_s": self.accepted,
            "rate_per_s": self.rate,
            "cpu_s": self.cpu,
            "workflow_tasks": self.workflow_tasks,
            "history_events": self.events,
        }


async def timed_gather(
    count: int,
    start: Callable[[int], Awaitable[_T]],
    finish: Callable[[_T], Awaitable[object]],
    pids: Mapping[str, int],
    settle: float = 0.0,
) -> tuple[Throughput, list[_T]]:
    """Start `count` units concurrently, then await every one; the figures (with CPU of `pids`), the handles.

    First waits `settle` seconds (see SETTLE_SECONDS).
    """
    await asyncio.sleep(settle)
    meter = CpuMeter(pids)
    meter.start()
    wall = time.time()
    t0 = time.perf_counter()
    handles = await asyncio.gather(*(start(i) for i in range(count)))
    accepted = time.perf_counter() - t0
    await asyncio.gather(*(finish(h) for h in handles))
    elapsed = time.perf_counter() - t0
    figures = Throughput(
        count=count,
        elapsed=elapsed,
        accepted=accepted,
        cpu=meter.stop(),
        started_at=wall,
        ended_at=wall + elapsed,
    )
    return figures, handles
