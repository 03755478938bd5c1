"""Multi-slice gangs: one job's tasks split evenly over `num_groups` distinct groups, all or nothing.

A JAX "multislice" program spans several TPU slices that talk over the
data-centre network; each slice runs one task per host. Iris places such a job
like a one-slice gang, only k times at once:

- The job's `n` tasks are split into k parts of `per = n / k`; a job whose
  tasks do not split evenly is never placed (the submission path rejects it).
- A group can host a part when `per` of its feasible workers can take one task
  now. The gang needs k distinct such groups, or it places nothing: the pass
  never holds part of a multi-slice gang.
- Among the groups that fit, best fit as for one slice: fewest fitting workers
  left over, partially used groups first on ties. The chosen groups become
  slices 0..k-1 in the order of their `group_by` value, so `slice-a` is slice 0
  next to `slice-b`.
- Task at position p of the sorted task indices (task i for a fresh gang) runs
  on host `p % per` of slice `p // per`; hosts of a slice in `tpu-worker-id`
  order, as for one slice.
- A failed (per, k) is remembered for the rest of the pass: capacity only
  shrinks, so any later gang of the bucket needing at least as much fails too.
- A gang that starves holds the k groups closest to fitting, as a one-slice
  gang holds one. Multi-slice gangs do not evict running work (yet).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence

from scheduler.placement import GangBucket, GroupCandidate, PassState
from scheduler.reasons import capacity_rejection, constraint_rejection, first_short_dimension, join_counts
from scheduler.types import Assignment, Constraint, Op, PendingJob


def tasks_per_group(job: PendingJob) -> int:
    """Tasks each group of the gang runs, or 0 when its tasks do not split evenly over its groups."""
    need, k = len(job.task_indices), max(1, job.num_groups)
    per = need // k
    return per if per * k == need else 0


def _failed_before(bucket: GangBucket, per: int, k: int) -> bool:
    return any(p <= per and n <= k for p, n in bucket.multi_failed)


def _group_name(state: PassState, bucket: GangBucket, group: GroupCandidate) -> str:
    return str(state.workers[group.members[0]].attributes[bucket.group_by])


def place(state: PassState, job: PendingJob, bucket: GangBucket) -> bool:
    """Place every task of the gang on k distinct groups (best fit) or none; return whether it was placed."""
    k = job.num_groups
    per = tasks_per_group(job)
    if per == 0 or _failed_before(bucket, per, k):
        return False
    candidates: list[tuple[tuple[int, int], int, GroupCandidate]] = []
    exact = 0
    dead = False
    for position, group in enumerate(bucket.groups):
        fitting = state._fitting(group, bucket.request)
        if fitting == 0:
            dead = True
            continue
        if fitting < per:
            continue
        key = (fitting - per, 0 if state.group_used[group.gid] else 1)
        candidates.append((key, position, group))
        if key == (0, 0):
            exact += 1
            if exact == k:
                break
    if dead:
        bucket.groups = [
            g for g in bucket.groups if g.fitting > 0 or g.seen_version != state.group_version[g.gid]
        ]
    if len(candidates) < k:
        bucket.multi_failed.append((per, k))
        return False
    chosen = [group for _, _, group in heapq.nsmallest(k, candidates, key=lambda c: (c[0], c[1]))]
    chosen.sort(key=lambda group: _group_name(state, bucket, group))
    request = bucket.request
    rc, rm, rg, rt = request.cpu_millis, request.memory_bytes, request.gpus, request.tpus
    fc, fm, fg, ft, reserved = state.free_cpu, state.free_mem, state.free_gpu, state.free_tpu, state.reserved
    tasks = sorted(job.task_indices)
    for slice_id, group in enumerate(chosen):
        rows = [
            row
            for row in group.members
            if not reserved[row] and fc[row] >= rc and fm[row] >= rm and fg[row] >= rg and ft[row] >= rt
        ][:per]
        for host, row in enumerate(rows):
            state._consume(row, 1, request)
            state.assignments.append(Assignment(job.job_id, tasks[slice_id * per + host], state.workers[row].worker_id))
    return True


def _short(state: PassState, rows: Sequence[int], bucket: GangBucket) -> str:
    """Why a group's workers cannot take a task: "1 have < 4 free tpus, 1 held for a starving job"."""
    request = bucket.request
    counts: Counter[str] = Counter()
    for row in rows:
        if state.reserved[row]:
            counts["reserved"] += 1
            continue
        dimension = first_short_dimension(
            request, state.free_cpu[row], state.free_mem[row], state.free_gpu[row], state.free_tpu[row]
        )
        if dimension is not None:
            counts[dimension] += 1
    parts = [capacity_rejection(d, counts[d], request) for d in ("cpu", "memory", "gpus", "tpus") if counts[d]]
    if counts["reserved"]:
        parts.append(f"{counts['reserved']} held for a starving job")
    return join_counts(parts)


def explain(state: PassState, bucket: GangBucket, per: int, k: int) -> str:
    """Say why k groups do not take the gang: "only 1 of 2 tpu-name groups fit (4 free workers each): ..."."""
    key = bucket.group_by
    big = [group for group in bucket.all_groups if len(group.members) >= per]
    if len(big) < k:
        constraints = (*bucket.feasibility.constraints, Constraint.stored(key, Op.EXISTS))
        counts, _ = state.index.count_excluded(constraints)
        parts = [constraint_rejection(c, n) for c, n in zip(constraints, counts, strict=True) if n]
        detail = f" ({join_counts(parts)})" if parts else ""
        return f"only {len(big)} of {k} {key} groups have {per} matching workers each{detail}"
    ranked = sorted(big, key=lambda group: -state._fitting(group, bucket.request))
    fit = sum(1 for group in ranked if state._fitting(group, bucket.request) >= per)
    if fit >= len(ranked):  # not reached: a failed placement leaves fewer than k groups that fit
        return f"{fit} of {k} {key} groups fit ({per} free workers each)"
    nxt = ranked[fit]
    free = state._fitting(nxt, bucket.request)
    return (
        f"only {fit} of {k} {key} groups fit ({per} free workers each): the next best has {free} free "
        f"({_short(state, nxt.members, bucket)})"
    )


def reserve(state: PassState, bucket: GangBucket, per: int, k: int) -> list[str]:
    """Hold the k groups closest to fitting a starving gang; their names (empty if k groups never could)."""
    big = [group for group in bucket.all_groups if len(group.members) >= per]
    if len(big) < k:
        return []
    best = heapq.nlargest(k, big, key=lambda group: state._fitting(group, bucket.request))
    for group in best:
        for row in group.members:
            if not state.reserved[row]:
                state._reserve(row)
    return sorted(_group_name(state, bucket, group) for group in best)


def run(state: PassState, job: PendingJob, bucket: GangBucket, starving: bool) -> int:
    """Place a multi-slice gang whole or explain (and, starving, reserve for) it; return the tasks placed."""
    if place(state, job, bucket):
        return len(job.task_indices)
    need, k, key = len(job.task_indices), job.num_groups, bucket.group_by
    per = tasks_per_group(job)
    if per == 0:
        state.reasons[job.job_id] = f"{need} tasks do not split evenly over {k} {key} groups"
        return 0
    reason = bucket.multi_reasons.get((per, k))
    if reason is None:
        reason = bucket.multi_reasons[per, k] = explain(state, bucket, per, k)
    if starving:
        names = reserve(state, bucket, per, k)
        if names:
            reason = f"{reason}; holding {key}={','.join(names)} for it (waited {job.waited_seconds:.0f}s)"
    state.reasons[job.job_id] = reason
    return 0
