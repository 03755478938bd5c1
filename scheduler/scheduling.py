"""The entry point of a pass and the pending reasons it writes.

The policy (queue order, backfill, starvation, best fit) is described in
`scheduler.placement`, where it is implemented, soft constraints in
`scheduler.preferences`, sharing (bands, credits, fair share) in
`scheduler.sharing` and eviction in `scheduler.preemption`; this module drives
the jobs through them in queue order and explains every job it leaves pending.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from scheduler import multislice, preferences, throttle
from scheduler.accounting import DEFAULT_RATES
from scheduler.placement import DEFAULT_POLICY, GangBucket, PassState, PlainBucket, SchedulingPolicy
from scheduler.preemption import Preemption, Turn, describe
from scheduler.reasons import capacity_rejection, constraint_rejection, join_counts
from scheduler.reservations import Reservation, Reservations, held_rows
from scheduler.sharing import FairQueue, Q, ShareSnapshot, effective_band
from scheduler.teams import TeamPass
from scheduler.types import (
    BAND_RANK,
    DEFAULT_BAND,
    Band,
    Constraint,
    Op,
    PendingJob,
    Resources,
    SchedulingResult,
    WorkerSnapshot,
)


def queue_order(jobs: Sequence[Q], share: ShareSnapshot | None = None) -> list[Q] | FairQueue[Q]:
    """The order a pass tries the queue; the one place it is written (the dashboard's queue page uses it too).

    `jobs` come in submission order (`PendingJob`s, or any `Queued`: what ordering reads of a job).
    Without `share`: higher band first, then higher priority, then FIFO. With `share`: a `FairQueue`
    (band, demoted to batch for a user without credits, then the user with the least fair share,
    then priority and FIFO); the pass tells it what each job placed, so shares grow and users
    interleave. Iterated without telling it anything, it is the order the pass considers the jobs
    when none of them places (what a queue of waiting jobs shows).
    """
    if share is not None:
        bands = {job.job_id: effective_band(job, share) for job in jobs}
        by_priority = sorted(jobs, key=lambda job: -job.priority) if any(job.priority for job in jobs) else jobs
        return FairQueue(by_priority, bands, share.shares(), share.policy)
    ordered = sorted(jobs, key=lambda job: -job.priority) if any(job.priority for job in jobs) else list(jobs)
    if any(job.band is not DEFAULT_BAND for job in jobs):
        ordered.sort(key=lambda job: -BAND_RANK[job.band])  # stable: priority, then FIFO, inside a band
    return ordered


def _placed(hosts: Sequence[WorkerSnapshot], job: PendingJob) -> int:
    """How many of `job`'s tasks one plain pass places on `hosts` (preemption's probe of a new slice)."""
    return len(find_assignments(hosts, [job]).assignments)


def find_assignments(
    workers: Sequence[WorkerSnapshot],
    jobs: Sequence[PendingJob],
    *,
    policy: SchedulingPolicy = DEFAULT_POLICY,
    share: ShareSnapshot | None = None,
    reservations: Sequence[Reservation] = (),
) -> SchedulingResult:
    """Plan one pass: place pending tasks on workers without exceeding free capacity; pure, inputs untouched.

    `jobs` come in queue (FIFO submission) order. Without `share`, higher bands
    go first, then FIFO. With `share` (users' credits and usage, running work,
    the autoscaler's headroom, the time) the pass shares the fleet: users
    without credits are demoted to batch, users inside a band are ordered by
    fair share (`scheduler.sharing`), and a job that does not fit may evict
    running work of a strictly lower band (`scheduler.preemption`). Returns the
    assignments, the evictions, the tasks whose scheduling timeout passed, and
    a reason for every job left with unplaced tasks or waiting for evictions.

    With `reservations`, their capacity is set aside for their trees, waiting ones are
    held first and their trees' jobs are placed only inside them (`scheduler.reservations`).
    """
    state = PassState(workers, jobs, policy)
    held = Reservations(state, reservations, explain_plain) if reservations else None
    if held is not None:
        held.hold_waiting()
    fair: FairQueue[PendingJob] | None = None
    preemption: Preemption | None = None
    bands: Mapping[str, Band] = {}
    weight, per_hour = 0.0, DEFAULT_RATES.per_hour
    ordered = queue_order(jobs, share)
    if share is not None and isinstance(ordered, FairQueue):
        fair, bands = ordered, ordered.bands
        preemption = Preemption(state, share, _placed) if share.running else None
        weight = share.policy.running_weight_hours
        per_hour = share.policy.rates.per_hour
    teams = TeamPass(share.teams, workers, ((j.job_id, j.user, j.request, len(j.tasks)) for j in share.running)) \
        if share is not None and share.teams else None  # fmt: skip
    if teams is not None and preemption is not None:
        preemption.use_teams(teams)
    walk = None if teams is None else _QuotaWalk(state, policy, preemption, bands, teams, fair, share, per_hour, weight)
    deferred: list[PendingJob] = []  # with teams: work beyond its team's quota, walked second (borrowing)
    for job in ordered:
        if not job.task_indices:
            continue
        held_back = 0  # tasks a throttled array's cap keeps waiting in this pass (scheduler.throttle)
        whole = job
        if job.max_concurrent:
            limited = throttle.capped(job)
            held_back = len(job.task_indices) - len(limited.task_indices)
            if held_back:
                state.reasons[job.job_id] = throttle.reason(job, held_back)
            if not limited.task_indices:
                continue  # waiting for its own tasks to end is not waiting for the fleet: no timeout
            job = limited
        timeout = job.scheduling_timeout_seconds
        if timeout is not None and job.timeout_wait() > timeout and not job.placed:
            # None of it placed: the fleet holds all of it back, not its cap (those behind the cap time out with
            # it, as an uncapped job's would), and the reason stays the fleet's of the last pass.
            state.timed_out.extend((whole.job_id, index) for index in whole.task_indices)
            if held_back:
                del state.reasons[job.job_id]
            continue
        if held is not None and held.place(job):
            continue  # a job of a reservation's tree: placed inside it or told why not
        rest = None
        if walk is not None:
            placed, rest = walk.within(job)
            if rest is not None:
                deferred.append(rest)
        else:
            placed = _try(state, job, policy, preemption, bands)
        if fair is not None and placed:
            fair.placed(job.user, per_hour(job.request) * weight * placed)
        if held_back and rest is None and placed < len(job.task_indices) and job.placed + placed:
            # the room under its cap did not fit either; with none of it placed, the fleet alone holds it back
            state.reasons[job.job_id] = f"{state.reasons[job.job_id]}; {throttle.reason(job, held_back)}"
    if walk is not None and deferred:
        walk.beyond_quota(deferred)
    if share is not None:
        _explain_demotions(state, jobs, bands)
    plan = held.plan() if held is not None else None
    return SchedulingResult(
        assignments=tuple(state.assignments),
        timed_out=tuple(state.timed_out),
        pending_reasons=state.reasons,
        evictions=preemption.plan() if preemption is not None else (),
        effective_bands=bands,
        reservation_holds=plan.holds if plan is not None else {},
        reservation_reasons=plan.reasons if plan is not None else {},
        queue=tuple(state.reasons),  # reasons are written in the order jobs are tried
    )


class _QuotaWalk:
    """The two walks of a pass with teams (`scheduler.teams`): work within its team's quota, then the rest.

    A team can be back within its quota after its jobs were deferred: a reclaim earlier in the pass evicted
    its borrowed units. Those jobs then take their within-quota turn (reclaiming too, if they must) before
    anything borrows, and again inside the borrowing walk whenever it evicts more. Otherwise a team would
    wait below its quota behind its own evicted gang while other teams keep what they borrowed.
    """

    def __init__(
        self, state: PassState, policy: SchedulingPolicy, preemption: Preemption | None, bands: Mapping[str, Band],
        teams: TeamPass, fair: FairQueue[PendingJob] | None, share: ShareSnapshot | None,
        per_hour: Callable[[Resources], float], weight: float,
    ) -> None:  # fmt: skip
        self.state, self.policy, self.preemption, self.bands = state, policy, preemption, bands
        self.teams, self.fair, self.share, self.per_hour, self.weight = teams, fair, share, per_hour, weight

    def within(self, job: PendingJob) -> tuple[int, PendingJob | None]:
        """Place the part of `job` that fits in its team's quota; (tasks placed, what is left beyond the quota).

        Nothing is left when the job was tried whole, or when its part within the quota did not all place
        (the rest waits with it, for the same reason).
        """
        teams = self.teams
        team = teams.team_of(job.user)
        n = len(job.task_indices)
        k = teams.within_quota(team, job.request, n)
        if k == 0 or (k < n and job.group_by):
            placed = 0 if self.teams.over_quota(team) else self._displace(job, team, Turn.OWN)
            if not placed:
                return 0, job
            return placed, (None if placed == n else replace(job, task_indices=job.task_indices[placed:]))
        part = job if k == n else replace(job, task_indices=job.task_indices[:k])
        if self.preemption is not None:
            self.preemption.ctx = (team, Turn.WITHIN)
        placed = _try(self.state, part, self.policy, self.preemption, self.bands)
        if placed:
            teams.placed(team, job.request, placed)
        if k == n or placed < k:
            return placed, None
        return placed, replace(job, task_indices=job.task_indices[k:])

    def _displace(self, job: PendingJob, team: str, turn: Turn) -> int:
        """Bands decide where quotas leave no room, without anything borrowed growing: `job` takes the place of
        running work of a lower band where what that work frees is room enough (never free capacity beside
        it, which would be borrowing more).

        `Turn.OWN`: inside a team at its quota, the team's own lower-band work only, so its use does not grow
        (the within-quota walk, only for a team not over its quota: one that borrows is reclaimed from first,
        its work beyond the quota being borrowed work, which goes after every team's work within its quota).
        `Turn.BEYOND`: borrowed work with no room left to borrow takes the place of borrowed work of a lower
        band, any team's, as band preemption would (docs/sharing.md), while its own borrowing limit allows.
        Tasks placed."""
        preemption, state = self.preemption, self.state
        rank = BAND_RANK[self.bands[job.job_id]]
        if preemption is None or job.num_groups > 1:
            return 0
        lowest = preemption.min_rank_of_team.get(team, rank) if turn is Turn.OWN else preemption.min_rank
        if lowest >= rank:
            return 0  # nothing it may take the place of runs in a lower band
        preemption.ctx, preemption.freed_only = (team, turn), True
        try:
            feasibility = state.feasibility_for(job)
            if job.group_by:
                victims = preemption.for_gang(job, state.gang_bucket(job, feasibility), rank)
                placed = len(job.task_indices) if victims is not None else 0
            else:
                bucket = state.plain_buckets.get((id(feasibility), job.request))
                if bucket is None:
                    bucket = state.plain_buckets[id(feasibility), job.request] = PlainBucket(feasibility, job.request)
                before = len(state.assignments)
                victims = preemption.for_plain(job, bucket, rank, job.task_indices)
                placed = len(state.assignments) - before
        finally:
            preemption.freed_only = False
        if placed:
            assert victims
            state.reasons[job.job_id] = describe(victims)
            self.teams.placed(team, job.request, placed)
        return placed

    def beyond_quota(self, deferred: list[PendingJob]) -> None:
        """Walk the deferred work: within-quota turns the pass's evictions made room for, then borrowing."""
        preemption, teams, state = self.preemption, self.teams, self.state
        seen = -1
        while preemption is not None and deferred and len(preemption.victims) != seen:
            seen = len(preemption.victims)  # a turn that evicts may bring yet another team within its quota
            deferred = [rest for rest in map(self._within_again, deferred) if rest is not None]
        teams.start_borrowing()
        fair, share = self.fair, self.share
        ordered = FairQueue(deferred, self.bands, fair.shares, share.policy) if fair and share else deferred
        # A starving gang that may not borrow enough now holds what may be borrowed (everyone's, or its team's
        # when its own borrowing limit is what stops it) from the work after it: else smaller borrowed jobs take
        # each unit freed, one at a time, and the gang never has its whole size at once (starvation_after).
        hold: tuple[str, str | None] | None = None  # (the gang, the team held, None for every team)
        reasons = state.reasons
        for job in ordered:
            if job.job_id in reasons:  # written in the quota walk (a throttled array's cap): the queue lists a
                reasons[job.job_id] = reasons.pop(job.job_id)  # job where it is tried, as this walk tries it
            left = self._within_again(job) if preemption is not None else job
            if left is None:
                continue
            team = teams.team_of(job.user)
            if hold is not None and hold[1] in (None, team):
                state.reasons[job.job_id] = (f"beyond team {team}'s quota; what may be borrowed is held for {hold[0]}, "
                                             "which waited past starvation_after")  # fmt: skip
                continue
            n = len(left.task_indices)
            k, why = teams.borrow_room(team, left.request, n)
            if (k == 0 or (k < n and left.group_by)) and preemption is not None:
                placed = self._displace_lower(left, team)
                if placed:
                    self._credit(job, placed)
                    continue
            if k == 0 or (k < n and left.group_by):
                # Which resources its quota lacks, then which it may not borrow (they can differ).
                over = teams.beyond(team, left.request, 1 if k == 0 else n)
                reason = f"beyond team {team}'s quota{f' ({over})' if over else ''} and {why}"
                if hold is None and left.group_by and left.waited_seconds >= self.policy.starvation_seconds:
                    hold = (job.job_id, team if why.startswith(f"team {team} ") else None)
                    reason = f"{reason}; holding what may be borrowed for it (waited {left.waited_seconds:.0f}s)"
                state.reasons[job.job_id] = reason
                continue
            part = replace(left, task_indices=left.task_indices[:k]) if k < n else left
            if preemption is not None:
                preemption.ctx = (team, Turn.BEYOND)
            placed = _try(state, part, self.policy, preemption, self.bands)
            if placed:
                teams.placed(team, job.request, placed)
            if k < n and placed == k:
                state.reasons[job.job_id] = f"placed {k} of {n} tasks beyond team {team}'s quota; {why}"
            elif placed < len(part.task_indices) and job.job_id in state.reasons:
                state.reasons[job.job_id] = f"beyond team {team}'s quota: {state.reasons[job.job_id]}"
            self._credit(job, placed)

    def _displace_lower(self, job: PendingJob, team: str) -> int:
        """Borrowed work the pass has no room left to lend to: the place of lower-band borrowed work (any
        team's) while its borrowing limit allows the whole of it, else only of its own team's lower-band work."""
        n = len(job.task_indices)
        may = self.teams.limit_room(team, job.request, n)
        if (job.group_by and may < n) or not may:
            return self._displace(job, team, Turn.OWN)
        return self._displace(job if may == n else replace(job, task_indices=job.task_indices[:may]), team, Turn.BEYOND)

    def _within_again(self, job: PendingJob) -> PendingJob | None:
        """Its within-quota turn again, if its team lost units to evictions in this pass (only that gives its
        quota room it did not have when the job was deferred)."""
        assert self.preemption is not None
        if self.teams.team_of(job.user) not in self.preemption.evicted_teams:
            return job
        placed, rest = self.within(job)
        self._credit(job, placed)
        return rest

    def _credit(self, job: PendingJob, placed: int) -> None:
        if self.fair is not None and placed:
            self.fair.placed(job.user, self.per_hour(job.request) * self.weight * placed)


Evict = tuple[Preemption, int] | None  # the pass's preemption state and the job's effective band rank


def _try(
    state: PassState, job: PendingJob, policy: SchedulingPolicy, preemption: Preemption | None,
    bands: Mapping[str, Band],
) -> int:  # fmt: skip
    """Place one job (evicting if its band, or with teams its quota, allows); return how many tasks it placed."""
    feasibility = state.feasibility_for(job)
    starving = job.waited_seconds >= policy.starvation_seconds
    evict = None
    if preemption is not None:
        rank = BAND_RANK[bands[job.job_id]]
        if preemption.may_evict_for(rank):
            evict = (preemption, rank)
    if job.group_by:
        if job.preferences and preferences.place_gang(state, job, feasibility):
            return len(job.task_indices)
        return _run_gang(state, job, state.gang_bucket(job, feasibility), starving, evict)
    key = (id(feasibility), job.request)
    bucket = state.plain_buckets.get(key)
    if bucket is None:
        bucket = state.plain_buckets[key] = PlainBucket(feasibility, job.request)
    early = preferences.place_plain(state, job, feasibility) if job.preferences else 0
    return _run_plain(state, job, bucket, starving, evict, early)


def _explain_demotions(state: PassState, jobs: Sequence[PendingJob], bands: Mapping[str, Band]) -> None:
    """Say in a demoted job's pending reason that it waits as batch because its user has no credits."""
    reasons = state.reasons
    for job in jobs:
        reason = reasons.get(job.job_id)
        if reason is not None and bands[job.job_id] != job.band:
            who = job.user or "the user"
            reasons[job.job_id] = f"scheduled as batch: {who} has no credits left ({job.band} needs credits); {reason}"


def _run_plain(
    state: PassState, job: PendingJob, bucket: PlainBucket, starving: bool, evict: Evict, early: int = 0
) -> int:
    """Place a plain job's tasks, evicting if allowed; explain (and for a starving job, reserve for) the rest.

    `early` tasks were placed already, on workers the job prefers (`scheduler.preferences`).
    """
    total = len(job.task_indices)
    placed = state.place_plain(job, bucket, early) if early < total else early
    if placed == total:
        return placed
    prefix = ""
    if evict is not None:
        preemption, rank = evict
        rest = job.task_indices[placed:]
        group = preemption.headroom_for(job, rest)
        if group is not None:
            prefix = f"waiting for a new {group} slice from the autoscaler (nothing evicted); "
        else:
            before = len(state.assignments)
            victims = preemption.for_plain(job, bucket, rank, rest)
            if victims:
                placed += len(state.assignments) - before
                prefix = describe(victims) + "; "
                if placed == total:
                    state.reasons[job.job_id] = describe(victims)
                    return placed
    if bucket.reason is None:
        bucket.reason = explain_plain(state, bucket.feasibility.constraints, bucket.request)
    reason = bucket.reason
    if placed:
        reason = f"placed {placed} of {total} tasks; {reason}"
    if starving:
        held = state.reserve_plain(job, bucket, total - placed)
        if held:
            workers = "1 worker" if held == 1 else f"{held} workers"
            reason = f"{reason}; holding {workers} for it (waited {job.waited_seconds:.0f}s)"
    state.reasons[job.job_id] = prefix + reason
    return placed


def _run_gang(state: PassState, job: PendingJob, bucket: GangBucket, starving: bool, evict: Evict) -> int:
    """Place a gang whole (evicting whole lower-band gangs if allowed) or explain why not; return tasks placed."""
    if job.num_groups > 1:  # a multi-slice gang: k groups at once (it does not evict)
        return multislice.run(state, job, bucket, starving)
    if state.place_gang(job, bucket):
        return len(job.task_indices)
    need = len(job.task_indices)
    prefix = ""
    if evict is not None:
        preemption, rank = evict
        group = preemption.headroom_for(job, job.task_indices)
        if group is not None:
            prefix = f"waiting for a new {group} slice from the autoscaler (nothing evicted); "
        else:
            victims = preemption.for_gang(job, bucket, rank)
            if victims is not None:
                state.reasons[job.job_id] = describe(victims)
                return need
    reason = bucket.reasons.get(need)
    if reason is None:
        reason = bucket.reasons[need] = explain_gang(state, bucket, need)
    if starving:
        group_name = state.reserve_gang(bucket, need)
        if group_name is not None:
            reason = f"{reason}; holding {bucket.group_by}={group_name} for it (waited {job.waited_seconds:.0f}s)"
    state.reasons[job.job_id] = prefix + reason
    return 0


_DIMENSIONS = ("fitting", "cpu", "memory", "gpus", "tpus", "reserved")


def _capacity_parts(state: PassState, rows: Iterable[int], request: Resources) -> tuple[int, list[str]]:
    """Charge each worker that cannot take the request to "reserved" or its first short resource.

    One comprehension codes every row (0 fits, 1-4 the first short dimension as in
    `reasons.first_short_dimension`, 5 reserved): reasons are explained for
    every bucket left pending, over up to every worker, so this loop is hot.
    """
    rc, rm, rg, rt = request.cpu_millis, request.memory_bytes, request.gpus, request.tpus
    fc, fm, fg, ft, reserved = state.free_cpu, state.free_mem, state.free_gpu, state.free_tpu, state.reserved
    codes = Counter(
        [
            5 if reserved[row]
            else 1 if fc[row] < rc
            else 2 if fm[row] < rm
            else 3 if fg[row] < rg
            else 4 if ft[row] < rt
            else 0
            for row in rows
        ]
    )
    parts = [capacity_rejection(_DIMENSIONS[d], codes[d], request) for d in (1, 2, 3, 4) if codes[d]]
    if codes[5]:
        parts.append(f"{codes[5]} held for a starving job")
    return codes[0], parts


def explain_plain(state: PassState, constraints: Sequence[Constraint], request: Resources) -> str:
    """Say why no worker takes another task.

    For example "0/6 workers: 4 lack tpu-topology=v5e-16, 2 have < 64 free cpu".
    """
    total = len(state.workers)
    if total == 0:
        return "no workers available"
    counts, remaining = state.index.count_excluded(constraints)
    parts = [constraint_rejection(c, n) for c, n in zip(constraints, counts, strict=True) if n]
    held = held_rows(state, state.aside, request) & set(remaining) if state.aside else None
    if held:  # workers that only a reservation's set-aside keeps from taking it
        remaining = remaining - held
    fitting, capacity = _capacity_parts(state, remaining, request)
    if held:
        capacity.append(f"{len(held)} held by reservations")
    return f"{fitting}/{total} workers: {join_counts(parts + capacity)}"


def explain_gang(state: PassState, bucket: GangBucket, need: int) -> str:
    """Say why no group takes the gang: too few matching workers anywhere, or too few free ones."""
    key = bucket.group_by
    best_matching = max((len(group.members) for group in bucket.all_groups), default=0)
    if best_matching < need:
        constraints = (*bucket.feasibility.constraints, Constraint.stored(key, Op.EXISTS))
        counts, _ = state.index.count_excluded(constraints)
        parts = [constraint_rejection(c, n) for c, n in zip(constraints, counts, strict=True) if n]
        detail = f" ({join_counts(parts)})" if parts else ""
        return f"no {key} group has {need} matching workers: best has {best_matching}{detail}"
    best = max(bucket.all_groups, key=lambda group: state._fitting(group, bucket.request))
    best_free = state._fitting(best, bucket.request)
    _, capacity = _capacity_parts(state, best.members, bucket.request)
    detail = f" ({join_counts(capacity)})" if capacity else ""
    return f"no {key} group has {need} free workers: best has {best_free}{detail}"
