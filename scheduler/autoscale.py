"""Autoscaling demand: which scale groups need how many new slices, and which idle slices can go.

Pure, like the rest of the package: the autoscaler workflow hands in the scale
groups, the slices it knows, the scheduler's pending jobs and workers, and the
time; it gets back a plan and carries `idle_since` into the next call.

How demand is decided, in the scheduler's own terms so the two never disagree:
1. Pending work is first placed, with the real `find_assignments`, on what exists
   or is on its way: the free capacity of registered workers plus the full
   capacity of slices still CREATING or BOOTSTRAPPING. What fits there needs no
   new slice (the scheduler simply has not run its pass yet, or the slice is
   still booting).
2. Each job left over is tried on a fresh, empty slice of every group in config
   order (again with `find_assignments`, on the hosts that group's slice would
   have, attributes included). A coscheduled job needs a whole slice whose hosts
   satisfy its constraints; plain tasks pack, so one new slice takes as many of
   them as fit. The first group that can host the job and has room gets it.
3. A group with `buffer_slices: N` keeps N spare slices beyond that demand: READY
   slices that are idle (and nothing placed on them in step 1), booting slices no
   pending work waits for, and slices planned for `min_slices` that no job claimed
   count as spare; the missing ones are created (within `max_slices`, unless the
   group backs off or waits out its scale_up_delay).
4. A READY slice whose every worker is idle (free == capacity, nothing placed on
   it in step 1) for `scale_down_delay` is removed, longest idle first, never
   below `min_slices`, never in a group that is scaling up, and never one of the
   group's last `buffer_slices` idle slices (the longest idle go first).
5. The plan says when time alone would change it (an idle slice reaching its
   delay, a group's backoff or scale_up_delay ending while work waits for it),
   so the workflow can look again then instead of at its next regular tick.

A multi-slice gang (`num_groups` k > 1) needs k slices at once: the groups of
existing or booting capacity that can host one slice's share count first (the
gang's remaining k' slices are then planned), and the k' new slices all come
from one scale group, or none is created for it.

Jobs with identical requests share one trial per group (the "class" cache of
Nomad's scheduler), so a queue of thousands of similar jobs costs a handful of
trials.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.scheduling import find_assignments
from scheduler.sharing import GroupHeadroom
from scheduler.throttle import capped
from scheduler.types import BAND_RANK, Assignment, AttrValue, PendingJob, Resources, WorkerSnapshot

# Slice states as the autoscaler workflow names them.
CREATING = "CREATING"
BOOTSTRAPPING = "BOOTSTRAPPING"
READY = "READY"
DRAINING = "DRAINING"
IN_FLIGHT = frozenset({CREATING, BOOTSTRAPPING})
LIVE = frozenset({CREATING, BOOTSTRAPPING, READY, DRAINING})

# The attributes every host of a slice gets besides its group's (activities.platforms.base.host_attributes,
# restated here because this package imports nothing outside the standard library).
SLICE_NAME_ATTRIBUTE = "tpu-name"
HOST_INDEX_ATTRIBUTE = "tpu-worker-id"
SLICE_ID_ATTRIBUTE = "iris-slice-id"
SCALE_GROUP_ATTRIBUTE = "iris-scale-group"
PROBE_TASKS = 1 << 14  # plain tasks offered to an empty new slice to learn how many it holds


@dataclass(frozen=True)
class GroupShape:
    """One scale group as the planner sees it; the workflow fills in its own timing and backoff."""

    name: str
    hosts_per_slice: int
    host_capacity: Resources
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    min_slices: int = 0
    max_slices: int = 1
    scale_up_delay: float = 0.0
    scale_down_delay: float = 300.0
    last_scale_up: float | None = None
    backoff_until: float | None = None
    backoff_reason: str = ""
    buffer_slices: int = 0  # idle READY slices kept beyond demand, within max_slices

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name: a scale group needs a name")
        if self.hosts_per_slice < 1:
            raise ValueError(f"hosts_per_slice: must be >= 1, got {self.hosts_per_slice}")
        if not 0 <= self.min_slices <= self.max_slices:
            raise ValueError(f"min_slices/max_slices: need 0 <= min <= max, got {self.min_slices}/{self.max_slices}")
        if self.scale_up_delay < 0 or self.scale_down_delay < 0:
            raise ValueError("scale_up_delay/scale_down_delay: must be >= 0")
        if self.buffer_slices < 0:
            raise ValueError(f"buffer_slices: must be >= 0, got {self.buffer_slices}")

    def blocked(self, now: float) -> str:
        """Why this group may not scale up right now ("" when it may)."""
        if self.backoff_until is not None and now < self.backoff_until:
            why = f": {self.backoff_reason}" if self.backoff_reason else ""
            return f"backing off for {math.ceil(self.backoff_until - now)}s{why}"
        if self.last_scale_up is not None and now - self.last_scale_up < self.scale_up_delay:
            wait = math.ceil(self.last_scale_up + self.scale_up_delay - now)
            return f"scale_up_delay {self.scale_up_delay:g}s: next scale-up in {wait}s"
        return ""


@dataclass(frozen=True)
class SliceView:
    """A slice the autoscaler knows of; FAILED and TERMINATED slices are left out by the caller."""

    slice_id: str
    group: str
    state: str
    worker_ids: tuple[str, ...] = ()
    idle_since: float | None = None

    def __post_init__(self) -> None:
        if self.state not in LIVE:
            raise ValueError(f"state: must be one of {', '.join(sorted(LIVE))}, got {self.state!r}")


@dataclass(frozen=True)
class ScalePlan:
    """What to do now; `idle_since` is carried into the next call's SliceViews."""

    create: Mapping[str, int]
    remove: tuple[str, ...]
    idle_since: Mapping[str, float | None]
    unmet: Mapping[str, str]
    group_reasons: Mapping[str, str]
    recheck_after: float | None = None
    """Seconds until the earliest moment this plan would change by time alone; None: nothing is due."""


def slice_hosts(group: GroupShape, slice_id: str) -> list[WorkerSnapshot]:
    """The workers a new slice of `group` would register, empty and with their attributes."""
    return [
        WorkerSnapshot(
            worker_id=f"{slice_id}-{i}",
            free=group.host_capacity,
            capacity=group.host_capacity,
            attributes={
                **group.attributes,
                SLICE_NAME_ATTRIBUTE: slice_id,
                HOST_INDEX_ATTRIBUTE: i,
                SLICE_ID_ATTRIBUTE: slice_id,
                SCALE_GROUP_ATTRIBUTE: group.name,
            },
        )
        for i in range(group.hosts_per_slice)
    ]


def plan_scaling(
    groups: Sequence[GroupShape],
    slices: Sequence[SliceView],
    pending: Sequence[PendingJob],
    workers: Sequence[WorkerSnapshot],
    now: float,
) -> ScalePlan:
    """Decide scale-ups and scale-downs for one autoscaler tick (see the module docstring)."""
    by_name = {g.name: g for g in groups}
    live = [s for s in slices if s.group in by_name]
    # A throttled array asks for no more capacity than its cap lets it use (scheduler.throttle).
    jobs = [capped(j) for j in pending if j.task_indices and not _timed_out(j)]
    jobs = [j for j in jobs if j.task_indices]

    used, leftover = _place_on_existing(by_name, live, jobs, workers)
    create, unmet, group_reasons, unclaimed = _plan_new_slices(groups, live, leftover, now)
    idle_since = _idle_since(live, workers, used, now)
    _plan_buffers(groups, live, idle_since, used, create, unclaimed, group_reasons, now)
    remove = _pick_removals(by_name, live, idle_since, create, now)
    return ScalePlan(
        create={g: n for g, n in create.items() if n > 0},
        remove=remove,
        idle_since=idle_since,
        unmet=unmet,
        group_reasons=group_reasons,
        recheck_after=_recheck_after(by_name, live, idle_since, remove, group_reasons, now),
    )


def _timed_out(job: PendingJob) -> bool:
    timeout = job.scheduling_timeout_seconds
    return timeout is not None and job.timeout_wait() > timeout


def _place_on_existing(
    by_name: Mapping[str, GroupShape],
    live: Sequence[SliceView],
    jobs: Sequence[PendingJob],
    workers: Sequence[WorkerSnapshot],
) -> tuple[set[str], list[PendingJob]]:
    """Place pending work on registered workers and booting slices; the workers used and the jobs left over."""
    registered = {w.worker_id for w in workers}
    pool = list(workers)
    for s in live:
        if s.state in IN_FLIGHT:
            pool += [h for h in slice_hosts(by_name[s.group], s.slice_id) if h.worker_id not in registered]
    result = find_assignments(pool, jobs)
    placed: dict[str, set[int]] = {}
    for a in result.assignments:
        placed.setdefault(a.job_id, set()).add(a.task_index)
    used = {a.worker_id for a in result.assignments}
    leftover = []
    rest: list[WorkerSnapshot] | None = None
    for job in jobs:
        done = placed.get(job.job_id, set())
        if len(done) < len(job.task_indices):
            if job.group_by and job.num_groups > 1:
                rest = _after(pool, jobs, result.assignments) if rest is None else rest
                job = _slices_still_needed(job, rest, used)
            leftover.append(replace(job, task_indices=tuple(i for i in job.task_indices if i not in done)))
    return used, leftover


def _after(
    pool: Sequence[WorkerSnapshot], jobs: Sequence[PendingJob], assignments: Sequence[Assignment]
) -> list[WorkerSnapshot]:
    """The pool's workers with what the assignments take out of their free capacity."""
    request = {job.job_id: job.request for job in jobs}
    taken: dict[str, Resources] = {}
    for a in assignments:
        taken[a.worker_id] = taken.get(a.worker_id, Resources()) + request[a.job_id]
    return [replace(w, free=w.free - taken[w.worker_id]) if w.worker_id in taken else w for w in pool]


def _slices_still_needed(job: PendingJob, rest: list[WorkerSnapshot], used: set[str]) -> PendingJob:
    """A multi-slice gang that did not fit whole: the most of its slices existing capacity holds count as
    placed (those workers become used, out of `rest`); the gang that is left, for new slices."""
    per = len(job.task_indices) // job.num_groups
    hosts = [w for w in rest if job.group_by in w.attributes]
    for m in range(job.num_groups - 1, 0, -1):
        part = replace(job, task_indices=job.task_indices[: m * per], num_groups=m)
        result = find_assignments(hosts, [part])
        if result.assignments:
            took = {a.worker_id for a in result.assignments}
            used |= took
            rest[:] = _after(rest, [part], result.assignments)
            k = job.num_groups - m
            return replace(job, task_indices=job.task_indices[m * per :], num_groups=k)
    return job


_ClassKey = tuple[object, ...]


def _class_key(job: PendingJob) -> _ClassKey:
    """Jobs that a group hosts equally well: same request, constraints, grouping and tolerations."""
    size = len(job.task_indices) if job.group_by else 0
    return (job.request, job.constraints, job.group_by, job.tolerations, size, job.num_groups)


@dataclass
class _Trial:
    """How one class of jobs fares on a fresh slice of one group."""

    per_slice: int  # tasks of one job that one new slice takes (a gang: all of them, or 0)
    reason: str  # why none fit, when per_slice == 0


def _trial(group: GroupShape, job: PendingJob) -> _Trial:
    """Place `job` alone on an empty slice of `group` with the real scheduler."""
    probe_id = f"{group.name}-new"
    # The trial is shared by every job of the class, whatever its size: offer plain tasks beyond what any
    # slice holds, so that per_slice is the slice's capacity and not the first job's task count.
    indices = job.task_indices if job.group_by else tuple(range(PROBE_TASKS))
    if job.group_by and job.num_groups > 1:  # one slice's share of a multi-slice gang
        indices = indices[: len(indices) // job.num_groups]
    probe = replace(job, task_indices=indices, waited_seconds=0.0, scheduling_timeout_seconds=None, num_groups=1)
    result = find_assignments(slice_hosts(group, probe_id), [probe])
    placed = len(result.assignments)
    if placed:
        return _Trial(placed, "")
    reason = result.pending_reasons.get(job.job_id, "does not fit")
    return _Trial(0, reason.replace(probe_id, "a new slice"))


def _plan_new_slices(
    groups: Sequence[GroupShape],
    live: Sequence[SliceView],
    leftover: Sequence[PendingJob],
    now: float,
) -> tuple[dict[str, int], dict[str, str], dict[str, str], dict[str, int]]:
    """New slices per group for the work that fits nowhere yet; why each job or group is stuck; and how
    many of the new slices (planned for min_slices) no job claimed."""
    count = {g.name: sum(1 for s in live if s.group == g.name) for g in groups}
    create = dict.fromkeys(count, 0)
    blocked = {g.name: g.blocked(now) for g in groups}
    group_reasons: dict[str, str] = {}
    unmet: dict[str, str] = {}
    trials: dict[tuple[_ClassKey, str], _Trial] = {}
    spare: dict[tuple[_ClassKey, str], int] = {}  # room left on slices planned in this call, per class

    fresh = dict.fromkeys(count, 0)  # slices planned for min_slices that no job has claimed yet
    for g in groups:  # min_slices first: they are owed whatever the queue holds
        missing = g.min_slices - count[g.name]
        if missing > 0:
            if blocked[g.name]:
                group_reasons[g.name] = blocked[g.name]
            else:
                create[g.name] = fresh[g.name] = missing

    for job in sorted(leftover, key=lambda j: (-BAND_RANK[j.band], -j.priority)):  # stable: FIFO inside a band
        key = _class_key(job)
        left = len(job.task_indices)
        reasons: list[str] = []
        for g in groups:
            if left == 0:
                break
            trial = trials.get((key, g.name))
            if trial is None:
                trial = trials[key, g.name] = _trial(g, job)
            if trial.per_slice == 0:
                reasons.append(f"{g.name}: {trial.reason}")
                continue
            if job.group_by and job.num_groups > 1:
                why = _new_slices_for_gang(g, job.num_groups, count, create, fresh, blocked[g.name])
                if why:
                    reasons.append(f"{g.name}: {why}")
                    group_reasons[g.name] = why
                else:
                    left = 0
                continue
            if not job.group_by:  # plain tasks first fill slices already planned for their class
                take = min(left, spare.get((key, g.name), 0))
                spare[key, g.name] = spare.get((key, g.name), 0) - take
                left -= take
            need = (1 if job.group_by else math.ceil(left / trial.per_slice)) if left else 0
            claimed = min(need, fresh[g.name])
            fresh[g.name] -= claimed
            need -= claimed
            if need and blocked[g.name]:
                reasons.append(f"{g.name}: {blocked[g.name]}")
                group_reasons[g.name] = blocked[g.name]
                need = 0
            room = g.max_slices - count[g.name] - create[g.name]
            if need and room <= 0:
                reason = f"at max_slices ({g.max_slices})"
                reasons.append(f"{g.name}: {reason}")
                group_reasons[g.name] = reason
            added = min(need, max(0, room))
            create[g.name] += added
            slices = claimed + added
            if job.group_by:
                left = 0 if slices else left
            else:
                capacity = slices * trial.per_slice
                spare[key, g.name] = spare.get((key, g.name), 0) + max(0, capacity - left)
                left = max(0, left - capacity)
        if left:
            unmet[job.job_id] = "; ".join(reasons) if reasons else "no scale group configured"
    return create, unmet, group_reasons, fresh


def _plan_buffers(
    groups: Sequence[GroupShape],
    live: Sequence[SliceView],
    idle_since: Mapping[str, float | None],
    used: set[str],
    create: dict[str, int],
    unclaimed: Mapping[str, int],
    group_reasons: dict[str, str],
    now: float,
) -> None:
    """Add to `create` the slices each group needs to have `buffer_slices` spare ones beyond demand."""
    for g in groups:
        if g.buffer_slices == 0:
            continue
        mine = [s for s in live if s.group == g.name]
        idle = sum(1 for s in mine if idle_since.get(s.slice_id) is not None)
        booting = sum(
            1 for s in mine
            if s.state in IN_FLIGHT
            and not used.intersection(s.worker_ids)
            and not used.intersection(h.worker_id for h in slice_hosts(g, s.slice_id))
        )  # fmt: skip
        missing = g.buffer_slices - idle - booting - unclaimed.get(g.name, 0)
        room = g.max_slices - len(mine) - create[g.name]
        if missing <= 0 or room <= 0:
            continue
        if g.blocked(now):
            group_reasons.setdefault(g.name, g.blocked(now))
            continue
        create[g.name] += min(missing, room)


def _new_slices_for_gang(
    g: GroupShape, k: int, count: dict[str, int], create: dict[str, int], fresh: dict[str, int], blocked: str
) -> str:
    """Plan k slices of `g` for a multi-slice gang, all or none; why not ("" when planned)."""
    room = 0 if blocked else max(0, g.max_slices - count[g.name] - create[g.name])
    if fresh[g.name] + room < k:
        return blocked or f"at max_slices ({g.max_slices}): {k} new slices needed, room for {fresh[g.name] + room}"
    claimed = min(k, fresh[g.name])
    fresh[g.name] -= claimed
    create[g.name] += k - claimed
    return ""


def _idle_since(
    live: Sequence[SliceView], workers: Sequence[WorkerSnapshot], used: set[str], now: float
) -> dict[str, float | None]:
    """When each READY slice became idle (all its workers registered and empty, none about to get work)."""
    by_id = {w.worker_id: w for w in workers}
    out: dict[str, float | None] = {}
    for s in live:
        hosts = [by_id.get(w) for w in s.worker_ids]
        idle = (
            s.state == READY
            and bool(hosts)
            and all(h is not None and h.capacity is not None and h.free == h.capacity for h in hosts)
            and not used.intersection(s.worker_ids)
        )
        out[s.slice_id] = (s.idle_since if s.idle_since is not None else now) if idle else None
    return out


def _pick_removals(
    by_name: Mapping[str, GroupShape],
    live: Sequence[SliceView],
    idle_since: Mapping[str, float | None],
    create: Mapping[str, int],
    now: float,
) -> tuple[str, ...]:
    """READY slices idle past their group's scale_down_delay, longest idle first, keeping min_slices
    and the group's last `buffer_slices` idle slices."""
    keep = {name: g.min_slices for name, g in by_name.items()}
    spare = {name: sum(1 for s in live if s.group == name and idle_since.get(s.slice_id) is not None) - g.buffer_slices
             for name, g in by_name.items()}  # fmt: skip
    remaining = {name: sum(1 for s in live if s.group == name and s.state != DRAINING) for name in by_name}
    candidates = sorted(
        (since, s.slice_id, s.group)
        for s in live
        if (since := idle_since.get(s.slice_id)) is not None
        and now - since >= by_name[s.group].scale_down_delay
        and create.get(s.group, 0) == 0
    )
    remove = []
    for _, slice_id, group in candidates:
        if remaining[group] > keep[group] and spare[group] > 0:
            remaining[group] -= 1
            spare[group] -= 1
            remove.append(slice_id)
    return tuple(remove)


def _recheck_after(
    by_name: Mapping[str, GroupShape],
    live: Sequence[SliceView],
    idle_since: Mapping[str, float | None],
    remove: Sequence[str],
    group_reasons: Mapping[str, str],
    now: float,
) -> float | None:
    """Seconds until an idle slice reaches its scale_down_delay or a group that work waits for may grow again."""
    due = [
        since + by_name[s.group].scale_down_delay
        for s in live
        if (since := idle_since.get(s.slice_id)) is not None and s.slice_id not in remove
    ]
    for name in group_reasons:
        g = by_name[name]
        if g.backoff_until is not None:
            due.append(g.backoff_until)
        if g.last_scale_up is not None:
            due.append(g.last_scale_up + g.scale_up_delay)
    later = [t - now for t in due if t > now]
    return min(later) if later else None


def headroom(groups: Sequence[GroupShape], slices: Sequence[SliceView], now: float) -> tuple[GroupHeadroom, ...]:
    """What each group can still bring, for the scheduler's preemption rule: booting slices plus room below max_slices.

    A group that backs off or waits out its scale_up_delay may add nothing now;
    its booting slices still count.
    """
    out = []
    for group in groups:
        mine = [s for s in slices if s.group == group.name]
        booting = sum(1 for s in mine if s.state in IN_FLIGHT)
        addable = 0 if group.blocked(now) else max(0, group.max_slices - len(mine))
        hosts = tuple(slice_hosts(group, f"{group.name}-new"))
        out.append(GroupHeadroom(group.name, hosts, booting + addable))
    return tuple(out)
