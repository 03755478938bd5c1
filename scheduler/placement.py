"""One scheduling pass: a snapshot of workers and a queue of jobs in, a plan out.

`find_assignments` is pure: it copies free capacity into flat per-pass arrays
(the "transient copy"), never touches its inputs and returns a
`SchedulingResult` that the caller commits.

The pipeline for each job, in queue order
-----------------------------------------
1. **Timeout**: a job whose `waited_seconds` exceeds its
   `scheduling_timeout_seconds` is reported in `timed_out`, never placed.
2. **Feasibility** (cached): the job's constraints plus one implicit
   NOT_EXISTS per taint it does not tolerate, answered by the class/posting
   index (`scheduler.index`) once per distinct (constraints, tolerations).
3. **Capacity and ranking**, per bucket of identical requests:
   - *Plain tasks* go, several at a time (as many as fit: min over resources
     of free // request), to the first worker in best-fit order that fits.
     The order keeps whole groups free for gangs: workers outside any group
     (no `tpu-name` or other group_by key) first, tightest first (fewest free
     tpus, then gpus, cpu, memory); then workers of groups already partially
     used when the pass starts (known from `WorkerSnapshot.capacity`); then
     untouched groups. The order is applied class by class (classes ranked by
     their best worker, members in that order inside a class) so that "first
     worker that fits" is a pruned descent in the class's capacity tree
     (`scheduler.capacity`) instead of a scan. Free capacity only shrinks in a
     pass, so a class where the request fits nowhere is skipped for good by
     that bucket, and the worker that took the last task is tried first for
     the next job of the bucket. With a constraint on a unique key (a host
     name) the bucket walks its feasible workers in order with a cursor.
   - *Gangs* (`group_by` set) need `len(task_indices)` distinct workers of one
     group: all or nothing. Among the groups where they fit, the gang takes
     the one with the fewest fitting workers left over (best fit), preferring
     partially used groups on ties; inside it, task i goes to the worker with
     the i-th smallest numeric `tpu-worker-id` (worker id order otherwise).
     Group counts are cached per bucket and refreshed only for groups whose
     version changed, and once a gang of size n fails in a bucket every later
     gang of size >= n in that bucket fails without a search.
4. **Reason**: a job left with unplaced tasks gets a pending reason counting
   the workers each filter rejected (cached per bucket).

Queue order, backfill and starvation (the policy)
-------------------------------------------------
- Jobs are tried strictly in order: higher `priority` band first, the caller's
  FIFO order inside a band (stable sort). An earlier job always gets first pick,
  so a later job never takes capacity an earlier job could use in this pass.
- Backfill: a job that cannot be placed reserves nothing and does not stop the
  walk, so a large stuck job never blocks the small ones behind it.
- Starvation: backfill alone lets a stream of small jobs keep a big gang from
  ever finding a whole free group. A job that has waited at least
  `SchedulingPolicy.starvation_seconds` and still does not fit gets a
  reservation for the rest of the pass: a gang holds the group closest to
  fitting (the most free fitting workers among groups with enough matching
  workers), a plain job holds one matching worker per unplaced task (those
  with the most free of its main resource). Later jobs in the pass cannot use
  reserved workers, so as their running tasks finish the capacity drains
  towards the starving job, which is early in the queue and gets it first in
  the next pass. The trade-off: while a reservation stands, capacity on the
  reserved workers may sit idle even though smaller jobs could use it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, repeat
from operator import attrgetter

from scheduler.attributes import is_number, taint_constraints, value_key, value_kind
from scheduler.capacity import CapacityTree
from scheduler.index import ClusterIndex
from scheduler.types import (
    Assignment,
    AttrValue,
    Constraint,
    PendingJob,
    Resources,
    WorkerSnapshot,
)

TPU_WORKER_ID = "tpu-worker-id"

# An Assignment from a (job id, task index, worker id) row, without a Python call: a plan is 100k of them.
_new_assignment = partial(tuple.__new__, Assignment)


def _emit(out: list[Assignment], job_id: str, indices: Sequence[int], worker_id: str) -> None:
    """Append one Assignment per task index, all on the same worker (built in C)."""
    out.extend(map(_new_assignment, zip(repeat(job_id), indices, repeat(worker_id))))


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    """Tunables of a pass; the defaults are what the control plane runs."""

    # A job pending at least this long reserves capacity when it does not fit.
    starvation_seconds: float = 600.0
    # Attributes that make workers part of a group to be kept whole for gangs,
    # in addition to every group_by key of the pending jobs.
    group_keys: tuple[str, ...] = ("tpu-name",)


DEFAULT_POLICY = SchedulingPolicy()


@dataclass(slots=True)
class Feasibility:
    """The workers that satisfy one (constraints, taints) combination.

    `classes` lists the feasible worker classes in plain-task order when every
    constraint is class-level; it is None when a constraint names a unique key,
    and placement then walks `rows` (the feasible workers) one by one.
    """

    constraints: tuple[Constraint, ...]
    classes: list[int] | None
    rows: Set[int] | None = None  # feasible worker rows, built on demand
    ordered: list[int] | None = None  # feasible rows in plain-task order, built on demand
    mask: bytearray | None = None  # 0/1 per worker row, built on demand


@dataclass(slots=True)
class PlainBucket:
    """Plain tasks with one request and one feasibility: a cursor over the candidates."""

    feasibility: Feasibility
    request: Resources
    cursor: int = 0  # index into feasibility.classes, or into feasibility.ordered without classes
    current: int = -1  # the worker that took the last task, tried first for the next one
    reason: str | None = None


@dataclass(slots=True)
class GroupCandidate:
    """A group that has at least one feasible worker for a gang bucket, with its cached fit count."""

    gid: int
    members: list[int]  # feasible members in task order (tpu-worker-id)
    seen_version: int = -1
    fitting: int = 0


@dataclass(slots=True)
class GangBucket:
    """Gangs with one request, feasibility and group key: the candidate groups and failure memo."""

    feasibility: Feasibility
    request: Resources
    group_by: str
    groups: list[GroupCandidate]  # live: groups where the request still fits at least once
    all_groups: list[GroupCandidate] = field(default_factory=list)  # for reasons and reservations
    min_failed: int = 1 << 62
    reasons: dict[int, str] = field(default_factory=dict)
    # Multi-slice gangs (scheduler.multislice): (tasks per group, groups) that failed, and their reasons.
    multi_failed: list[tuple[int, int]] = field(default_factory=list)
    multi_reasons: dict[tuple[int, int], str] = field(default_factory=dict)


_GID = attrgetter("gid")


def _member_order(worker: WorkerSnapshot) -> tuple[int, float, str]:
    """Sort key inside a group: numeric tpu-worker-id first, then worker id."""
    value = worker.attributes.get(TPU_WORKER_ID)
    if is_number(value):
        return (0, float(value), worker.worker_id)  # type: ignore[arg-type]
    return (1, 0.0, worker.worker_id)


def _constraint_key(constraints: Sequence[Constraint]) -> tuple[tuple[str, str, object, object], ...]:
    """Hashable identity of a constraint list that keeps True apart from 1 (dataclass eq does not)."""
    return tuple(
        (c.key, str(c.op), tuple(value_key(v) for v in c.value), c.soft)
        if isinstance(c.value, (tuple, list))
        else (c.key, str(c.op), "" if c.value is None else value_kind(c.value), c.value)
        for c in constraints
    )


class PassState:
    """The transient state of one pass (indexes, free capacity copy, buckets); built, run once, discarded."""

    def __init__(
        self, workers: Sequence[WorkerSnapshot], jobs: Sequence[PendingJob], policy: SchedulingPolicy
    ) -> None:
        self.workers = workers
        self.jobs = jobs
        self.policy = policy
        gang_keys = {job.group_by for job in jobs if job.group_by}
        self.group_keys: list[str] = list(dict.fromkeys([*policy.group_keys, *sorted(gang_keys)]))
        self.index = ClusterIndex.build(workers, extra_unique=self.group_keys)
        self.free_cpu = [w.free.cpu_millis for w in workers]
        self.free_mem = [w.free.memory_bytes for w in workers]
        self.free_gpu = [w.free.gpus for w in workers]
        self.free_tpu = [w.free.tpus for w in workers]
        self.reserved = bytearray(len(workers))
        self.aside: dict[int, Resources] = {}  # row -> capacity set aside for a reservation (scheduler.reservations)
        self._build_groups()
        self._build_order()
        self.feasibility_by_id: dict[tuple[int, int], Feasibility] = {}
        self.feasibility: dict[object, Feasibility] = {}
        self.plain_buckets: dict[tuple[int, Resources], PlainBucket] = {}
        self.gang_buckets: dict[tuple[int, Resources, str], GangBucket] = {}
        # Per request, the candidates of groups whose members are all feasible: shared by every gang bucket
        # with that request (a preference's tiers, constraint lists over the same classes), so a group's fit
        # count is counted once per change, not once per bucket.
        self.whole_groups: dict[Resources, dict[int, GroupCandidate]] = {}
        self.class_candidates: dict[tuple[Resources, str, int], list[GroupCandidate]] = {}  # _class_candidates
        # (id of a job's preferences, id of its hard feasibility) -> its preference tiers (scheduler.preferences)
        self.preference_tiers: dict[tuple[int, int], list[Feasibility]] = {}
        self.assignments: list[Assignment] = []
        self.timed_out: list[tuple[str, int]] = []
        self.reasons: dict[str, str] = {}

    # -- snapshot structures -------------------------------------------------

    def _build_groups(self) -> None:
        """Group workers by every group key: members in task order, versions, initial partial use."""
        self.group_ids: dict[tuple[str, str, AttrValue], int] = {}
        self.group_members: list[list[int]] = []
        self.groups_of_key: dict[str, list[int]] = {key: [] for key in self.group_keys}
        self.worker_groups: list[tuple[int, ...]] = [()] * len(self.workers)
        for row, worker in enumerate(self.workers):
            attributes = worker.attributes
            gids: list[int] = []
            for key in self.group_keys:
                if key in attributes:
                    ident = (key, attributes[key].__class__.__name__, attributes[key])
                    gid = self.group_ids.get(ident)
                    if gid is None:
                        gid = self.group_ids[ident] = len(self.group_members)
                        self.group_members.append([])
                        self.groups_of_key[key].append(gid)
                    self.group_members[gid].append(row)
                    gids.append(gid)
            if gids:
                self.worker_groups[row] = tuple(gids)
        workers = self.workers
        for members in self.group_members:
            members.sort(key=lambda row: _member_order(workers[row]))
        self.group_version = [0] * len(self.group_members)
        self.group_classes: dict[str, tuple[dict[int, list[int]], dict[int, list[int]]]] = {}  # _groups_by_class
        self.group_used = [
            any(
                workers[row].capacity is not None and workers[row].capacity != workers[row].free
                for row in members
            )
            for members in self.group_members
        ]

    def _build_order(self) -> None:
        """Rank workers for plain tasks: non-group tightest first, then used groups, then whole ones."""
        position: dict[int, int] = {}
        for members in self.group_members:
            for place, row in enumerate(members):
                position.setdefault(row, place)
        keys: list[tuple[int, ...]] = []
        for row in range(len(self.workers)):
            gids = self.worker_groups[row]
            if not gids:
                keys.append(
                    (0, self.free_tpu[row], self.free_gpu[row], self.free_cpu[row], self.free_mem[row], row)
                )
            else:
                gid = gids[0]
                keys.append((1, 0 if self.group_used[gid] else 1, gid, position[row]))
        self.order = sorted(range(len(self.workers)), key=keys.__getitem__)
        self.rank = [0] * len(self.workers)
        for place, row in enumerate(self.order):
            self.rank[row] = place
        # Class members in plain-task order, classes ordered by their first member.
        self.members: list[list[int]] = [[] for _ in self.index.class_members]
        self.position = [0] * len(self.workers)
        class_of = self.index.class_of
        for row in self.order:
            members = self.members[class_of[row]]
            self.position[row] = len(members)
            members.append(row)
        self.class_rank = {
            class_id: self.rank[members[0]] for class_id, members in enumerate(self.members) if members
        }
        self.trees: list[CapacityTree | None] = [None] * len(self.members)

    def tree(self, class_id: int) -> CapacityTree:
        """Return the class's capacity tree, built on first use (most passes touch few classes)."""
        tree = self.trees[class_id]
        if tree is None:
            tree = self.trees[class_id] = CapacityTree(
                self.members[class_id],
                self.free_cpu,
                self.free_mem,
                self.free_gpu,
                self.free_tpu,
                self.reserved,
            )
        return tree

    def feasibility_for(self, job: PendingJob) -> Feasibility:
        """Return the cached feasible workers for the job's constraints and tolerations."""
        memo_key = (id(job.constraints), id(job.tolerations))
        found = self.feasibility_by_id.get(memo_key)
        if found is not None:
            return found
        taints = (
            taint_constraints(job.constraints, job.tolerations, self.index.taint_keys)
            if self.index.taint_keys
            else ()
        )
        found = self.feasibility_of((*job.constraints, *taints))
        self.feasibility_by_id[memo_key] = found
        return found

    def feasibility_of(self, full: tuple[Constraint, ...]) -> Feasibility:
        """Return the cached feasible workers for a whole constraint list (taints included).

        Class-level when no constraint names a unique key (one evaluation per worker class, as
        Nomad's computed classes); otherwise the feasible workers are found row by row.
        """
        key = _constraint_key(full)
        found = self.feasibility.get(key)
        if found is None:
            classes = None
            if not any(c.key in self.index.unique for c in full):
                class_ok = self.index.class_index.match_all(full)
                classes = sorted(
                    (c for c in class_ok if c in self.class_rank), key=self.class_rank.__getitem__
                )
            found = self.feasibility[key] = Feasibility(full, classes)
        return found

    def plain_bucket(self, feasibility: Feasibility, request: Resources) -> PlainBucket:
        """Return (building on first use) the plain bucket for a feasibility and a request."""
        key = (id(feasibility), request)
        bucket = self.plain_buckets.get(key)
        if bucket is None:
            bucket = self.plain_buckets[key] = PlainBucket(feasibility, request)
        return bucket

    def rows(self, feasibility: Feasibility) -> Set[int]:
        """Return the feasible worker rows (built once per feasibility, from the index)."""
        if feasibility.rows is None:
            feasibility.rows = self.index.matching_workers(feasibility.constraints)
        return feasibility.rows

    def ordered(self, feasibility: Feasibility) -> list[int]:
        """Return the feasible workers in plain-task order (built once per feasibility)."""
        if feasibility.ordered is None:
            rows = self.rows(feasibility)
            if len(rows) * 4 < len(self.workers):
                feasibility.ordered = sorted(rows, key=self.rank.__getitem__)
            else:
                feasibility.ordered = [row for row in self.order if row in rows]
        return feasibility.ordered

    # -- capacity bookkeeping -----------------------------------------------

    def _consume(self, row: int, count: int, request: Resources) -> None:
        """Take `count` times the request from a worker's free capacity and refresh what caches it."""
        fc, fm, fg, ft = self.free_cpu, self.free_mem, self.free_gpu, self.free_tpu
        fc[row] -= count * request.cpu_millis
        fm[row] -= count * request.memory_bytes
        fg[row] -= count * request.gpus
        ft[row] -= count * request.tpus
        tree = self.trees[self.index.class_of[row]]
        if tree is not None:
            tree.update(self.position[row], fc[row], fm[row], fg[row], ft[row])
        for gid in self.worker_groups[row]:
            self.group_version[gid] += 1
            self.group_used[gid] = True

    def take(self, row: int, cpu: int, mem: int, gpu: int, tpu: int) -> None:
        """Take an arbitrary amount from a worker's free capacity (a preemptor beyond what its victims free)."""
        fc, fm, fg, ft = self.free_cpu, self.free_mem, self.free_gpu, self.free_tpu
        fc[row] = max(0, fc[row] - cpu)
        fm[row] = max(0, fm[row] - mem)
        fg[row] = max(0, fg[row] - gpu)
        ft[row] = max(0, ft[row] - tpu)
        tree = self.trees[self.index.class_of[row]]
        if tree is not None and not self.reserved[row]:
            tree.update(self.position[row], fc[row], fm[row], fg[row], ft[row])
        for gid in self.worker_groups[row]:
            self.group_version[gid] += 1
            self.group_used[gid] = True

    def _reserve(self, row: int) -> None:
        """Hold a worker for a starving job: nobody later in this pass may use it."""
        self.reserved[row] = 1
        tree = self.trees[self.index.class_of[row]]
        if tree is not None:
            tree.update(self.position[row], -1, -1, -1, -1)
        for gid in self.worker_groups[row]:
            self.group_version[gid] += 1

    # -- plain tasks ---------------------------------------------------------

    def place_plain(self, job: PendingJob, bucket: PlainBucket, start: int = 0) -> int:
        """Place as many of the job's tasks from `start` on as fit, several per worker at once; return the
        job's tasks placed so far (`start` included)."""
        tasks = job.task_indices
        total = len(tasks)
        placed = start
        request = bucket.request
        rc, rm, rg, rt = request.cpu_millis, request.memory_bytes, request.gpus, request.tpus
        fc, fm, fg, ft, reserved = self.free_cpu, self.free_mem, self.free_gpu, self.free_tpu, self.reserved
        out = self.assignments
        job_id = job.job_id
        row = bucket.current
        while placed < total:
            if row < 0 or reserved[row] or fc[row] < rc or fm[row] < rm or fg[row] < rg or ft[row] < rt:
                row = self._next_fit(bucket)
                if row < 0:
                    break
            take = total - placed
            if rc:
                take = min(take, fc[row] // rc)
            if rm:
                take = min(take, fm[row] // rm)
            if rg:
                take = min(take, fg[row] // rg)
            if rt:
                take = min(take, ft[row] // rt)
            self._consume(row, take, request)
            worker_id = self.workers[row].worker_id
            _emit(out, job_id, tasks[placed : placed + take], worker_id)
            placed += take
        bucket.current = row
        return placed

    def _next_fit(self, bucket: PlainBucket) -> int:
        """Return the first worker in plain-task order that fits the bucket's request, or -1.

        Class by class through capacity trees; a class with no fit now has none
        later in the pass either, so the bucket's cursor moves past it for good.
        """
        request = bucket.request
        rc, rm, rg, rt = request.cpu_millis, request.memory_bytes, request.gpus, request.tpus
        classes = bucket.feasibility.classes
        if classes is not None:
            while bucket.cursor < len(classes):
                class_id = classes[bucket.cursor]
                position = self.tree(class_id).first_fit(rc, rm, rg, rt)
                if position >= 0:
                    return self.members[class_id][position]
                bucket.cursor += 1
            return -1
        ordered = self.ordered(bucket.feasibility)
        fc, fm, fg, ft, reserved = self.free_cpu, self.free_mem, self.free_gpu, self.free_tpu, self.reserved
        while bucket.cursor < len(ordered):
            row = ordered[bucket.cursor]
            if not reserved[row] and fc[row] >= rc and fm[row] >= rm and fg[row] >= rg and ft[row] >= rt:
                return row
            bucket.cursor += 1
        return -1

    def reserve_plain(self, job: PendingJob, bucket: PlainBucket, count: int) -> int:
        """Hold up to `count` feasible workers with the most free of the job's main resource."""
        request = bucket.request
        if request.tpus:
            column = self.free_tpu
        elif request.gpus:
            column = self.free_gpu
        elif request.cpu_millis or not request.memory_bytes:
            column = self.free_cpu
        else:
            column = self.free_mem
        reserved = self.reserved
        chosen = heapq.nlargest(
            count,
            (row for row in self.rows(bucket.feasibility) if not reserved[row]),
            key=column.__getitem__,
        )
        for row in chosen:
            self._reserve(row)
        return len(chosen)

    # -- gangs ---------------------------------------------------------------

    def gang_bucket(self, job: PendingJob, feasibility: Feasibility) -> GangBucket:
        """Return (building on first use) the gang bucket for the job's request and group key."""
        group_by = job.group_by or ""
        key = (id(feasibility), job.request, group_by)
        bucket = self.gang_buckets.get(key)
        if bucket is not None:
            return bucket
        whole = self.whole_groups.get(job.request)
        if whole is None:
            whole = self.whole_groups[job.request] = {}
        group_members = self.group_members
        groups: list[GroupCandidate] = []
        if feasibility.classes is not None:  # class-level: a group of one class is all in or all out
            by_class, mixed = self._groups_by_class(group_by)
            touched: set[int] = set()  # mixed groups with a member in a feasible class
            for class_id in feasibility.classes:
                gids = by_class.get(class_id)
                if gids:
                    groups += self._class_candidates(job.request, group_by, class_id, gids, whole)
                gids = mixed.get(class_id)
                if gids:
                    touched.update(gids)
            if touched:
                in_ok, class_of = set(feasibility.classes).__contains__, self.index.class_of.__getitem__
                for gid in touched:
                    members = group_members[gid]
                    feasible = list(compress(members, map(in_ok, map(class_of, members))))
                    groups.append(self._candidate(gid, feasible, whole))
            groups.sort(key=_GID)  # the order of `gids` (ids grow in order of first appearance), for the same ties
        else:
            if feasibility.mask is None:
                mask = bytearray(len(self.workers))
                for row in self.rows(feasibility):
                    mask[row] = 1
                feasibility.mask = mask
            in_mask = feasibility.mask.__getitem__
            for gid in self.groups_of_key.get(group_by, ()):
                members = group_members[gid]
                kept = list(compress(members, map(in_mask, members)))
                if kept:
                    groups.append(self._candidate(gid, kept, whole))
        bucket = GangBucket(feasibility, job.request, group_by, groups, list(groups))
        self.gang_buckets[key] = bucket
        return bucket

    def _candidate(self, gid: int, feasible: list[int], whole: dict[int, GroupCandidate]) -> GroupCandidate:
        """The group's candidate for a bucket whose feasible members are `feasible`: the request's shared one
        (`whole_groups`) when they are all its members."""
        if len(feasible) < len(self.group_members[gid]):
            return GroupCandidate(gid, feasible)
        candidate = whole.get(gid)
        if candidate is None:
            candidate = whole[gid] = GroupCandidate(gid, self.group_members[gid])
        return candidate

    def _class_candidates(
        self, request: Resources, group_by: str, class_id: int, gids: list[int], whole: dict[int, GroupCandidate]
    ) -> list[GroupCandidate]:
        """The shared candidates of a class's groups (`gids`, all members of that class) for a request."""
        key = (request, group_by, class_id)
        found = self.class_candidates.get(key)
        if found is None:
            found = self.class_candidates[key] = [self._candidate(gid, self.group_members[gid], whole) for gid in gids]
        return found

    def _groups_by_class(self, group_by: str) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """A group key's groups whose members share one worker class (a slice's hosts do), by that class,
        and the others (mixed) under each class they have a member of, each in id order; built once per key
        and pass, so a bucket looks only at the mixed groups its classes touch."""
        found = self.group_classes.get(group_by)
        if found is None:
            class_of = self.index.class_of
            by_class: dict[int, list[int]] = {}
            mixed: dict[int, list[int]] = {}
            for gid in self.groups_of_key.get(group_by, ()):
                classes = set(map(class_of.__getitem__, self.group_members[gid]))
                if len(classes) == 1:
                    by_class.setdefault(classes.pop(), []).append(gid)
                else:
                    for class_id in classes:
                        mixed.setdefault(class_id, []).append(gid)
            found = self.group_classes[group_by] = (by_class, mixed)
        return found

    def _fitting(self, group: GroupCandidate, request: Resources) -> int:
        """Count the group's feasible members that can take one task now (cached by group version)."""
        version = self.group_version[group.gid]
        if group.seen_version == version:
            return group.fitting
        rc, rm, rg, rt = request.cpu_millis, request.memory_bytes, request.gpus, request.tpus
        fc, fm, fg, ft, reserved = self.free_cpu, self.free_mem, self.free_gpu, self.free_tpu, self.reserved
        count = 0
        for row in group.members:
            if not reserved[row] and fc[row] >= rc and fm[row] >= rm and fg[row] >= rg and ft[row] >= rt:
                count += 1
        group.seen_version, group.fitting = version, count
        return count

    def place_gang(self, job: PendingJob, bucket: GangBucket) -> bool:
        """Place every task of the gang in one group (best fit) or none; return whether it was placed."""
        need = len(job.task_indices)
        if need >= bucket.min_failed:
            return False
        best: GroupCandidate | None = None
        best_key = (1 << 62, 2)
        dead = False
        for group in bucket.groups:
            fitting = self._fitting(group, bucket.request)
            if fitting == 0:
                dead = True
                continue
            if fitting < need:
                continue
            key = (fitting - need, 0 if self.group_used[group.gid] else 1)
            if key < best_key:
                best, best_key = group, key
                if key == (0, 0):
                    break
        if dead:
            bucket.groups = [
                g for g in bucket.groups if g.fitting > 0 or g.seen_version != self.group_version[g.gid]
            ]
        if best is None:
            bucket.min_failed = need
            return False
        request = bucket.request
        rc, rm, rg, rt = request.cpu_millis, request.memory_bytes, request.gpus, request.tpus
        fc, fm, fg, ft, reserved = self.free_cpu, self.free_mem, self.free_gpu, self.free_tpu, self.reserved
        chosen = [
            row
            for row in best.members
            if not reserved[row] and fc[row] >= rc and fm[row] >= rm and fg[row] >= rg and ft[row] >= rt
        ][:need]
        for index, row in zip(sorted(job.task_indices), chosen, strict=True):
            self._consume(row, 1, request)
            self.assignments.append(Assignment(job.job_id, index, self.workers[row].worker_id))
        return True

    def reserve_gang(self, bucket: GangBucket, need: int) -> str | None:
        """Hold the group closest to fitting a starving gang; return its name (None if none ever could)."""
        best: GroupCandidate | None = None
        best_fitting = -1
        for group in bucket.all_groups:
            if len(group.members) >= need:
                fitting = self._fitting(group, bucket.request)
                if fitting > best_fitting:
                    best, best_fitting = group, fitting
        if best is None:
            return None
        for row in best.members:
            if not self.reserved[row]:
                self._reserve(row)
        return str(self.workers[best.members[0]].attributes[bucket.group_by])
