"""The entry point of a pass and the pending reasons it writes.

The policy (queue order, backfill, starvation, best fit) is described in
`scheduler.placement`, where it is implemented; this module drives the jobs
through it in queue order and explains every job it leaves pending.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from scheduler.placement import DEFAULT_POLICY, GangBucket, PassState, PlainBucket, SchedulingPolicy
from scheduler.reasons import capacity_rejection, constraint_rejection, first_short_dimension, join_counts
from scheduler.types import Constraint, Op, PendingJob, Resources, SchedulingResult, WorkerSnapshot


def find_assignments(
    workers: Sequence[WorkerSnapshot],
    jobs: Sequence[PendingJob],
    *,
    policy: SchedulingPolicy = DEFAULT_POLICY,
) -> SchedulingResult:
    """Plan one pass: place pending tasks on workers without exceeding free capacity; pure, inputs untouched.

    `jobs` come in queue (FIFO submission) order; higher priority bands go
    first. Returns the assignments, the tasks whose scheduling timeout passed,
    and a reason for every job left with unplaced tasks.
    """
    state = PassState(workers, jobs, policy)
    ordered = sorted(jobs, key=lambda job: -job.priority)  # stable: FIFO inside a band
    for job in ordered:
        if not job.task_indices:
            continue
        timeout = job.scheduling_timeout_seconds
        if timeout is not None and job.waited_seconds > timeout:
            state.timed_out.extend((job.job_id, index) for index in job.task_indices)
            continue
        feasibility = state.feasibility_for(job)
        starving = job.waited_seconds >= policy.starvation_seconds
        if job.group_by:
            _run_gang(state, job, state.gang_bucket(job, feasibility), starving)
        else:
            key = (id(feasibility), job.request)
            bucket = state.plain_buckets.get(key)
            if bucket is None:
                bucket = state.plain_buckets[key] = PlainBucket(feasibility, job.request)
            _run_plain(state, job, bucket, starving)
    return SchedulingResult(
        assignments=tuple(state.assignments),
        timed_out=tuple(state.timed_out),
        pending_reasons=state.reasons,
    )


def _run_plain(state: PassState, job: PendingJob, bucket: PlainBucket, starving: bool) -> None:
    """Place a plain job's tasks; explain (and for a starving job, reserve for) the rest."""
    placed = state.place_plain(job, bucket)
    total = len(job.task_indices)
    if placed == total:
        return
    if bucket.reason is None:
        bucket.reason = explain_plain(state, bucket.feasibility.constraints, bucket.request)
    reason = bucket.reason
    if placed:
        reason = f"placed {placed} of {total} tasks; {reason}"
    if starving:
        held = state.reserve_plain(job, bucket, total - placed)
        if held:
            reason = f"{reason}; holding {held} workers for it (waited {job.waited_seconds:.0f}s)"
    state.reasons[job.job_id] = reason


def _run_gang(state: PassState, job: PendingJob, bucket: GangBucket, starving: bool) -> None:
    """Place a gang whole or explain why not; a starving gang reserves the group closest to fitting."""
    if state.place_gang(job, bucket):
        return
    need = len(job.task_indices)
    reason = bucket.reasons.get(need)
    if reason is None:
        reason = bucket.reasons[need] = explain_gang(state, bucket, need)
    if starving:
        group = state.reserve_gang(bucket, need)
        if group is not None:
            reason = f"{reason}; holding {bucket.group_by}={group} for it (waited {job.waited_seconds:.0f}s)"
    state.reasons[job.job_id] = reason


def _capacity_parts(state: PassState, rows: Iterable[int], request: Resources) -> tuple[int, list[str]]:
    """Charge each worker that cannot take the request to "reserved" or its first short resource."""
    reserved = 0
    short: Counter[str] = Counter()
    fitting = 0
    for row in rows:
        if state.reserved[row]:
            reserved += 1
            continue
        dimension = first_short_dimension(
            request, state.free_cpu[row], state.free_mem[row], state.free_gpu[row], state.free_tpu[row]
        )
        if dimension is None:
            fitting += 1
        else:
            short[dimension] += 1
    parts = [capacity_rejection(d, short[d], request) for d in ("cpu", "memory", "gpus", "tpus") if short[d]]
    if reserved:
        parts.append(f"{reserved} held for a starving job")
    return fitting, parts


def explain_plain(state: PassState, constraints: Sequence[Constraint], request: Resources) -> str:
    """Say why no worker takes another task.

    For example "0/6 workers: 4 lack tpu-topology=v5e-16, 2 have < 64 free cpu".
    """
    total = len(state.workers)
    if total == 0:
        return "no workers available"
    counts, remaining = state.index.count_excluded(constraints)
    parts = [constraint_rejection(c, n) for c, n in zip(constraints, counts, strict=True) if n]
    fitting, capacity = _capacity_parts(state, remaining, request)
    return f"{fitting}/{total} workers: {join_counts(parts + capacity)}"


def explain_gang(state: PassState, bucket: GangBucket, need: int) -> str:
    """Say why no group takes the gang: too few matching workers anywhere, or too few free ones."""
    key = bucket.group_by
    best_matching = max((len(group.members) for group in bucket.all_groups), default=0)
    if best_matching < need:
        constraints = (*bucket.feasibility.constraints, Constraint(key, Op.EXISTS))
        counts, _ = state.index.count_excluded(constraints)
        parts = [constraint_rejection(c, n) for c, n in zip(constraints, counts, strict=True) if n]
        detail = f" ({join_counts(parts)})" if parts else ""
        return f"no {key} group has {need} matching workers: best has {best_matching}{detail}"
    best = max(bucket.all_groups, key=lambda group: state._fitting(group, bucket.request))
    best_free = state._fitting(best, bucket.request)
    _, capacity = _capacity_parts(state, best.members, bucket.request)
    detail = f" ({join_counts(capacity)})" if capacity else ""
    return f"no {key} group has {need} free workers: best has {best_free}{detail}"
