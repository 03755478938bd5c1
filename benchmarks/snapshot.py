"""`python -m benchmarks snapshot`: the scheduling pass's snapshot at fleet scale, as the workflow builds it.

No server: a scheduler state like the scale bench's (`--workers` with two attributes, `--placed` tasks and
`--pending` queued tasks in jobs of `--tasks-per-job`) is built in memory, then timed (CPU of this thread):
a run's first pass (nothing cached), the next with nothing changed, one after a commit of `--commit` tasks
and as many releases, and one after a cordon. Also the committed capacity: added up from every placement vs
read from the index.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

from activities.contracts import task_workflow_id
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry, committed
from workflows.scheduler.snapshot_cache import SnapshotCache

CPU_MILLIS = 500
MEMORY = 1 << 30


def build_state(workers: int, placed: int, pending: int, tasks_per_job: int) -> SchedulerState:
    """The scale bench's fleet: hosts of 8 cpus, tasks of 0.5 cpu and 1 GiB, placed round-robin."""
    state = SchedulerState()
    for i in range(workers):
        w = WorkerEntry(f"bench-{i:05d}", "s", 8_000, 32 << 30, 0, 0, {"pool": "bench", "zone": f"zone-{i % 4}"})
        state.workers[w.worker_id] = w
    ids = list(state.workers)
    spec = SchedulingSpec(cpu_millis=CPU_MILLIS, memory_bytes=MEMORY)
    for n in range(placed):
        job, index = f"run-{n // tasks_per_job:06d}", n % tasks_per_job
        state.placements[task_workflow_id(job, index)] = Placement(
            job, index, 0, ids[n % len(ids)], CPU_MILLIS, MEMORY, 0, 0, user="", band="interactive", placed_at=1.0
        )
    for j in range((pending + tasks_per_job - 1) // tasks_per_job):
        n = min(tasks_per_job, pending - j * tasks_per_job)
        job_id = f"queued-{j:06d}"
        state.pending[job_id] = PendingEntry(job_id, spec, dict.fromkeys(range(n), 0), 2.0)
        state.pending_reasons[job_id] = "0 of 10000 workers: 10000 have < 0.5 free cpu"
    return state


def cpu_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        out = fn()
        return (time.thread_time() - started) * 1000, out
    finally:
        gc.enable()


def churn(state: SchedulerState, commits: int, now: float) -> None:
    """What a pass changes: `commits` tasks of the queue placed (round-robin) and as many placements released."""
    ids = list(state.workers)
    for key in list(state.placements)[:commits]:
        del state.placements[key]
    left = commits
    for entry in list(state.pending.values()):
        for index in sorted(entry.attempts):
            if left == 0:
                return
            entry.attempts.pop(index)
            w = ids[left % len(ids)]
            state.placements[task_workflow_id(entry.job_id, index)] = Placement(
                entry.job_id, index, 0, w, CPU_MILLIS, MEMORY, 0, 0, band="interactive", placed_at=now
            )
            left -= 1
        if not entry.attempts:
            del state.pending[entry.job_id]


def build_ms(cache: SnapshotCache, state: SchedulerState, now: float) -> tuple[float, bytes]:
    """The CPU of a pass's build, compression included."""
    return cpu_ms(lambda: cache.build(state, now))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks snapshot", description=__doc__)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--placed", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--tasks-per-job", type=int, default=10)
    parser.add_argument("--commit", type=int, default=10_000, help="tasks placed (and released) between passes")
    args = parser.parse_args(argv)
    state = build_state(args.workers, args.placed, args.pending, args.tasks_per_job)
    print(f"snapshot: {args.workers} workers, {len(state.placements)} placed, {args.pending} queued "
          f"({len(state.pending)} jobs)")  # fmt: skip
    ms, _ = cpu_ms(lambda: [committed(state) for _ in range(1)])
    recount, _ = cpu_ms(lambda: _recount(state))
    print(f"  committed capacity     index copy {ms:6.1f} ms   recount of every placement {recount:6.1f} ms")
    cache = SnapshotCache()
    cold, data = build_ms(cache, state, 10.0)
    print(f"  first pass of a run    {cold:6.1f} ms  ({len(data) / 1e6:.2f} MB zlib)")
    warm, _ = build_ms(cache, state, 11.0)
    print(f"  next, nothing changed  {warm:6.1f} ms")
    churn(state, args.commit, 12.0)
    after, _ = build_ms(cache, state, 12.0)
    print(f"  after {args.commit} placed/released {after:6.1f} ms")
    state.workers[next(iter(state.workers))].cordoned = True  # every running job's worker rows move
    moved, _ = build_ms(cache, state, 13.0)
    print(f"  after a cordon         {moved:6.1f} ms")
    return 0


def _recount(state: SchedulerState) -> dict[str, list[int]]:
    used: dict[str, list[int]] = {}
    for p in state.placements.values():
        u = used.setdefault(p.worker_id, [0, 0, 0, 0])
        u[0] += p.cpu_millis
        u[1] += p.memory_bytes
        u[2] += p.gpus
        u[3] += p.tpus
    return used
