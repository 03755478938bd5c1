"""When will it start? Queue positions and an estimated start for the jobs a pass leaves waiting.

The estimate (pure; the pass's clock is the snapshot's `now`)
-------------------------------------------------------------
- **Position** is the order the pass tried the waiting jobs in (band, quota
  first with teams, fair share, aging, submission): 1 is tried first next time.
- **Durations.** Iris has no per-job time limit, so a task is taken to run as
  long as the median of the last finished tasks (`typical_seconds`, kept by the
  scheduler over its last 256 releases). A running task ends at its start plus
  that, or, if it ran longer already, after a tenth of it more.
- **Replay.** Walking the queue in order, each job needs its unplaced tasks'
  requests in total; it starts at the first moment the fleet's free capacity,
  plus what the running tasks and the jobs ahead of it release as they end,
  covers that in every resource. It then holds the capacity for its own
  typical duration. This is capacity in aggregate: it ignores constraints,
  groups and fragmentation, so it is a lower bound for a job that waits for a
  particular kind of worker, and the basis says what it assumed.
- Without a finished task to learn from, or when the job would fit in the free
  capacity now (it waits for something else: a constraint, a group, its
  team's quota), there is no estimate (None) and the basis says why.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.reasons import beyond_every_worker
from scheduler.types import PendingJob, Resources

MAX_ESTIMATED = 200  # the first jobs of the queue that get a position and an estimate


@dataclass(frozen=True, slots=True)
class Estimate:
    """One waiting job's place in the queue and when it may start (seconds on the snapshot's clock)."""

    job_id: str
    position: int
    start: float | None
    basis: str


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _never(why: str) -> str:
    return f"no worker is big enough for one of its tasks: {why}"


def estimate_starts(
    queue: Sequence[PendingJob],
    free: Resources,
    running: Iterable[tuple[float, Resources]],
    now: float,
    typical_seconds: float | None,
    reasons: Mapping[str, str] | None = None,
    largest: Resources | None = None,
) -> list[Estimate]:
    """Estimates for `queue` (waiting jobs in pass order, each with its unplaced tasks), first MAX_ESTIMATED.

    `free` is the fleet's free capacity once the pass's plan is carried out, `running` the start time and
    request of every running task (those the plan just placed included). `largest` is, per resource, the
    most one worker has (or one the autoscaler can add): a job whose task asks for more never starts.
    """
    jobs = list(queue[:MAX_ESTIMATED])
    # Jobs whose task asks for more than any worker has wait for a bigger worker, not for their turn: no
    # estimate, and no place in the replay (the jobs after them are not held up by them).
    never = {j.job_id: why for j in jobs if largest is not None and (why := beyond_every_worker(j.request, largest))}
    if typical_seconds is None or typical_seconds <= 0:
        unknown = "no task has finished yet to learn how long work runs"
        return [Estimate(j.job_id, i + 1, None, _never(never[j.job_id]) if j.job_id in never else unknown)
                for i, j in enumerate(jobs)]  # fmt: skip
    typical = typical_seconds
    events: list[tuple[float, int, int, int, int]] = []
    for started, r in running:
        ran = now - started
        end = now + (typical - ran if ran < typical else max(1.0, ran * 0.1))
        events.append((end, r.cpu_millis, r.memory_bytes, r.gpus, r.tpus))
    heapq.heapify(events)
    pool = [free.cpu_millis, free.memory_bytes, free.gpus, free.tpus]
    out = []
    t = now
    learned = f"tasks taken to run ~{_minutes(typical)}, the median of recent ones"
    skipped = 0
    for position, job in enumerate(jobs, start=1):
        if job.job_id in never:
            out.append(Estimate(job.job_id, position, None, _never(never[job.job_id])))
            skipped += 1
            continue
        n = len(job.task_indices)
        r = job.request
        need = [r.cpu_millis * n, r.memory_bytes * n, r.gpus * n, r.tpus * n]
        ahead = position - 1 - skipped  # the jobs ahead that take capacity before it
        if t == now and all(p >= q for p, q in zip(pool, need, strict=True)):
            why = (reasons or {}).get(job.job_id, "")
            out.append(Estimate(job.job_id, position, None,
                                f"the capacity it needs is free in total but not where it may run: {why}"))  # fmt: skip
            continue
        while any(p < q for p, q in zip(pool, need, strict=True)) and events:
            end, c, m, g, tp = heapq.heappop(events)
            t = max(t, end)
            pool[0] += c
            pool[1] += m
            pool[2] += g
            pool[3] += tp
        if any(p < q for p, q in zip(pool, need, strict=True)):
            out.append(Estimate(job.job_id, position, None, "it needs more than the whole fleet can free"))
            continue
        for d in range(4):
            pool[d] -= need[d]
        heapq.heappush(events, (t + typical, need[0], need[1], need[2], need[3]))
        ahead_text = f"after {ahead} job{'s' if ahead != 1 else ''} ahead" if ahead else "first in the queue"
        # No duration relative to now in the sentence: published, it stays the same while the estimate holds.
        out.append(
            Estimate(job.job_id, position, t, f"{ahead_text}, once running work frees what it needs ({learned})")
        )
    return out
