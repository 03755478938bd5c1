"""The naive first-fit scheduler the bench compares against.

For every task it scans all workers in input order and takes the first one
whose free capacity covers the request and whose attributes satisfy every
constraint (checked with the reference evaluator). A coscheduled job takes the
first group, in order of first appearance, with enough such workers. No index,
no classes, no buckets, no best fit: this is what the real scheduler must beat
in speed and match or beat in placements.

The scan is capacity-first (a cheap integer check before constraints): that is
the obvious way to write it and keeps the baseline honest rather than slow.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from scheduler.attributes import evaluate_all, is_number
from scheduler.types import Assignment, PendingJob, WorkerSnapshot


def first_fit(
    workers: Sequence[WorkerSnapshot], jobs: Sequence[PendingJob], *, budget_seconds: float | None = None
) -> tuple[list[Assignment], int]:
    """Place jobs in queue order by first fit; return (assignments, jobs processed within the budget)."""
    start = time.perf_counter()
    free = [[w.free.cpu_millis, w.free.memory_bytes, w.free.gpus, w.free.tpus] for w in workers]
    out: list[Assignment] = []
    ordered = sorted(jobs, key=lambda job: -job.priority)
    for processed, job in enumerate(ordered):
        if budget_seconds is not None and time.perf_counter() - start > budget_seconds:
            return out, processed
        request = (job.request.cpu_millis, job.request.memory_bytes, job.request.gpus, job.request.tpus)
        if job.group_by:
            out.extend(_gang(workers, free, job, request))
            continue
        for index in job.task_indices:
            for row, worker in enumerate(workers):
                room = free[row]
                if (
                    room[0] >= request[0]
                    and room[1] >= request[1]
                    and room[2] >= request[2]
                    and room[3] >= request[3]
                    and evaluate_all(job.constraints, worker.attributes)
                ):
                    for dimension in range(4):
                        room[dimension] -= request[dimension]
                    out.append(Assignment(job.job_id, index, worker.worker_id))
                    break
    return out, len(ordered)


def _gang(
    workers: Sequence[WorkerSnapshot], free: list[list[int]], job: PendingJob, request: tuple[int, ...]
) -> list[Assignment]:
    """First group (by first appearance) with enough fitting workers takes the whole gang."""
    key = job.group_by or ""
    groups: dict[object, list[int]] = {}
    for row, worker in enumerate(workers):
        if key not in worker.attributes:
            continue
        room = free[row]
        if all(room[d] >= request[d] for d in range(4)) and evaluate_all(job.constraints, worker.attributes):
            value = worker.attributes[key]
            groups.setdefault((type(value).__name__, value), []).append(row)
    need = len(job.task_indices)
    for rows in groups.values():
        if len(rows) >= need:

            def order(row: int) -> tuple[int, float, str]:
                value = workers[row].attributes.get("tpu-worker-id")
                return (0, float(value), "") if is_number(value) else (1, 0.0, workers[row].worker_id)  # type: ignore[arg-type]

            chosen = sorted(rows, key=order)[:need]
            placed = []
            for index, row in zip(sorted(job.task_indices), chosen, strict=True):
                for dimension in range(4):
                    free[row][dimension] -= request[dimension]
                placed.append(Assignment(job.job_id, index, workers[row].worker_id))
            return placed
    return []
