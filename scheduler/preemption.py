"""Gang-aware preemption: which running work a pending job of a higher band evicts, if any.

Called by the pass for a job it could not place on free capacity. The rules:

1. Only a strictly lower band is ever a victim, and never `production` (no
   band is above it). The bands compared are the preemptor's effective band
   (`scheduler.sharing.effective_band`) and the band the victim was placed in.
2. Capacity that needs no eviction comes first: free capacity (the pass tried
   it already), then capacity the autoscaler can bring (`GroupHeadroom`: a
   booting slice, or a new one within `max_slices`). A job that fits on a new
   slice of a group with headroom left claims it and waits for it; nothing is
   evicted for it.
3. Evict only when that makes the job fit now: a gang needs `need` workers of
   one group that fit once the victims are gone, a plain task one worker. If no
   victim set does it, nothing is evicted and the job keeps its pending reason.
4. A coscheduled victim is one unit: every running task of the gang goes,
   never half of it. A plain job's tasks are separate units.
5. Cheapest victim set: lowest band first, then least resource-time lost (the
   credits its tasks used since they started, which a restart throws away),
   then fewest tasks. Per group (gang) or worker (plain task) the search adds
   candidate units cheapest first until the job fits, then drops every unit,
   most expensive first, that the fit does not need; the cheapest result
   across groups or workers wins. (An exact minimum is a set-cover problem;
   greedy-then-prune is what keeps a pass at 100k jobs fast.) Groups and
   workers wait in a heap by cost, computed once per kind of job and band;
   costs only rise as a pass evicts and places, so a popped entry whose cost
   still holds is the cheapest, and the next preemptor of the same kind does
   not search the fleet again.
6. The preemptor is placed in the same plan, on the workers its victims free:
   its assignments wait until the victims have released their capacity, and
   its pending reason says so ("evicting 2 batch tasks of ana/sweep-3").
   Capacity a victim frees beyond what the preemptor takes becomes free at the
   next pass, once the victim has really stopped.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import replace
from enum import Enum
from itertools import compress, repeat
from typing import TYPE_CHECKING, cast

from scheduler.sharing import RunningJob, RunningTask, ShareSnapshot
from scheduler.teams import Borrowed, RunningColumns, TeamPass, borrowed_units
from scheduler.types import BAND_RANK, Assignment, Band, Eviction, PendingJob, Resources, WorkerSnapshot

if TYPE_CHECKING:
    from scheduler.placement import GangBucket, GroupCandidate, PassState, PlainBucket

PRODUCTION_RANK = BAND_RANK[Band.PRODUCTION]


class Turn(Enum):
    """Which of a team's turns a search runs in (scheduler.teams; the pass's `_QuotaWalk`)."""

    WITHIN = "within"  # within its quota: it may reclaim other teams' borrowed work of any band but production
    BEYOND = "beyond"  # borrowing: other teams' borrowed work of a lower band only
    OWN = "own"  # at its quota: only its own work of a lower band, and only where what that frees is room enough
PROBE_TASKS = 1 << 14  # plain tasks offered to an empty new slice to learn how many it holds
Cost = tuple[int, float, int]  # (highest victim band rank, resource-time lost in credits, tasks)
Extra = list[int]  # cpu, memory, gpus, tpus a worker gains when its victims go


class Unit:
    """What is evicted together: a whole running gang, or one task of a plain job.

    `cheapest_first` sorts them: lowest band, least lost, fewest tasks (ids make it total). A search builds
    thousands of plain units: their fields are all they hold, so few objects outlive it.
    """

    __slots__ = ("band", "borrowed", "evicted", "indices", "job_id", "lost", "rank", "request", "rows", "team")

    def __init__(
        self,
        job_id: str,
        band: Band,
        rank: int,
        indices: tuple[int, ...],
        rows: tuple[int, ...],
        request: Resources,
        lost: float,
    ) -> None:
        self.job_id = job_id
        self.band = band
        self.rank = rank
        self.indices = indices  # task indices evicted together
        self.rows = rows  # the worker row of each task still in the snapshot
        self.request = request
        self.lost = lost  # credits its tasks used since they started, thrown away by a restart
        self.evicted = False
        self.team = ""  # with teams (scheduler.teams): the unit's team and whether it runs on borrowed capacity
        self.borrowed = False

    def usage(self) -> list[int]:
        """What the unit holds in all: its request times its tasks."""
        r, n = self.request, len(self.indices)
        return [r.cpu_millis * n, r.memory_bytes * n, r.gpus * n, r.tpus * n]


def cheapest_first(unit: Unit) -> tuple[int, float, int, str, tuple[int, ...]]:
    """A unit's sort key: lowest band, least lost, fewest tasks, then its job id and task indices."""
    return (unit.rank, unit.lost, len(unit.indices), unit.job_id, unit.indices)


def _add(extra: dict[int, Extra], unit: Unit, sign: int) -> None:
    r = unit.request
    for row in unit.rows:
        e = extra.get(row)
        if e is None:
            e = extra[row] = [0, 0, 0, 0]
        e[0] += sign * r.cpu_millis
        e[1] += sign * r.memory_bytes
        e[2] += sign * r.gpus
        e[3] += sign * r.tpus


def _borrowed_workers(borrowed: Borrowed, jobs: Sequence[tuple[str, RunningColumns, tuple[str, ...]]]) -> list[str]:
    """The workers of the borrowed units among `jobs` (team, the job's columns as `borrowed_units` reads them, and
    its tasks' workers): the only places, with the searching team's own, where a reclaim finds a victim.

    A plain task is borrowed when (start, job id) comes after its team's cut (`Borrowed`); per job that is one
    comparison of every start with the cut's, run in C, but for the job at the cut itself."""
    out: list[str] = []
    for team, (job_id, _, indices, starts), workers in jobs:
        cut = borrowed.cuts.get(team)
        if cut is None:
            continue
        if not indices:  # a gang: one unit, at its first task's start
            if borrowed(team, job_id, starts[0], -1):
                out.extend(workers)
            continue
        cut_start, cut_job = cut
        if job_id == cut_job:
            out.extend(w for w, s, i in zip(workers, starts, indices, strict=True) if borrowed(team, job_id, s, i))
            continue
        after = operator.ge if job_id > cut_job else operator.gt  # (start, job id) > cut
        out.extend(compress(workers, map(after, starts, repeat(cut_start))))
    return out


def _cost(units: Sequence[Unit]) -> Cost:
    if not units:
        return (-1, 0.0, 0)
    return (max(u.rank for u in units), sum(u.lost for u in units), sum(len(u.indices) for u in units))


class Preemption:
    """The running work of one pass as eviction units, the autoscaler's headroom, and the searches."""

    def __init__(
        self, state: PassState, share: ShareSnapshot, placed: Callable[[Sequence[WorkerSnapshot], PendingJob], int]
    ) -> None:
        """`placed(hosts, job)`: how many of `job`'s tasks a pass places on `hosts` (the scheduling pass itself)."""
        self.state = state
        self.placed = placed
        self.share = share
        self.row_of = row_of = {w.worker_id: row for row, w in enumerate(state.workers)}
        now = share.now
        self.on_row: dict[int, list[Unit]] = {}  # built per worker on first use: most are never looked at
        self.gangs_on_row: dict[int, list[Unit]] = {}
        self.plain_on: dict[str, list[tuple[RunningJob, RunningTask, int]]] = {}  # by worker id
        self.per_hour: dict[str, float] = {}  # a plain job's credits per task-hour, by job id (units_on)
        self._singles: dict[int, tuple[int]] = {}  # (i,) for task index i, one tuple for every unit of that index
        self.min_rank = PRODUCTION_RANK
        for job in share.running:
            rank = BAND_RANK[job.band]
            if rank >= PRODUCTION_RANK or not job.tasks:
                continue  # production is never a victim
            self.min_rank = min(self.min_rank, rank)
            if job.coscheduled:
                per_second = share.policy.rates.per_hour(job.request) / 3600
                lost = sum(per_second * max(0.0, now - t.started_at) for t in job.tasks)
                rows = tuple(row_of[t.worker_id] for t in job.tasks if t.worker_id in row_of)
                unit = Unit(job.job_id, job.band, rank, tuple(t.task_index for t in job.tasks), rows, job.request, lost)
                for row in set(rows):
                    self.gangs_on_row.setdefault(row, []).append(unit)
                continue
            plain_on = self.plain_on
            for t in job.tasks:
                found = plain_on.get(t.worker_id)
                if found is None:
                    plain_on[t.worker_id] = [(job, t, rank)]
                else:
                    found.append((job, t, rank))
        self.slices_left = {g.group: g.slices for g in share.headroom}
        self.trials: dict[tuple[object, ...], int] = {}
        self.gang_failed: dict[tuple[object, ...], int] = {}  # memo(bucket, rank) -> smallest need that failed
        self.plain_failed: set[tuple[object, ...]] = set()
        self.plain_heaps: dict[tuple[object, ...], list[tuple[Cost, int]]] = {}
        self.gang_heaps: dict[tuple[tuple[object, ...], int], list[tuple[Cost, int]]] = {}
        self.victims: list[tuple[Unit, str, int, str]] = []  # (unit, preemptor, its rank, its team if a reclaim)
        # Teams (scheduler.teams): the pass's team accounting, and the preemptor's (team, turn) for the search
        # under way; None without teams, when eligibility is the band rule alone.
        self.teams: TeamPass | None = None
        self.ctx: tuple[str, Turn] | None = None
        self.min_rank_of_team: dict[str, int] = {}
        self.evicted_teams: set[str] = set()  # teams that lost units in this pass (their quota may have room again)
        # In the OWN turn a task fits only in what its victims free (never in free capacity: that would be
        # borrowing), so the team's use does not grow.
        self.freed_only = False
        self.team_by_job: dict[str, str] = {}
        self.borrowed = Borrowed()  # which running units are borrowed (scheduler.teams)
        self._rows_with_units: set[int] | None = None
        # With teams, where a reclaim search looks: each team's rows (those running its work), and the rows of
        # the teams over their quota (the only ones with borrowed units); per searching team, its own and those.
        self._rows_of_team: dict[str, set[int]] = {}
        self._borrowed_rows: set[int] = set()
        self._search_rows: dict[str, set[int]] = {}
        self.has_units = bool(self.gangs_on_row or self.plain_on)

    def use_teams(self, teams: TeamPass) -> None:
        """Account for teams: tag units with their team and mark the borrowed ones (oldest first within quota)."""
        self.teams = teams
        by_team: dict[str, list[RunningColumns]] = {}
        team_of = teams.team_of
        self.team_by_job = team_by_job = {}
        gang_start: dict[str, float] = {}
        over = {name for name in teams.used if teams.over_quota(name)}  # only these have borrowed units
        row_of, rows_of_team = self.row_of, self._rows_of_team
        workers_of_team: dict[str, set[str]] = {}
        over_jobs: list[tuple[str, RunningColumns, tuple[str, ...]]] = []  # (team, job's columns, its workers)
        min_rank_of_team: dict[str, int] = {}  # the lowest band each team runs (production: none evictable)
        self.min_rank_of_team = min_rank_of_team
        # Per job, its tasks' columns (RunningTask is a tuple: transposed in C, not a Python loop per task).
        for job in self.share.running:
            tasks = job.tasks
            if not tasks:
                continue
            team_by_job[job.job_id] = team = team_of(job.user)
            rank = BAND_RANK[job.band]
            if rank < min_rank_of_team.get(team, PRODUCTION_RANK):
                min_rank_of_team[team] = rank
            indices, worker_ids, starts = zip(*tasks, strict=True)
            ids = workers_of_team.get(team)
            if ids is None:
                workers_of_team[team] = set(worker_ids)
            else:
                ids.update(worker_ids)
            if team not in over:
                if job.coscheduled:
                    gang_start[job.job_id] = 0.0
                continue
            jobs = by_team.get(team)
            if jobs is None:
                jobs = by_team[team] = []
            r = job.request
            columns: RunningColumns
            if job.coscheduled:
                n = len(tasks)
                start = gang_start[job.job_id] = min(starts)
                columns = (job.job_id, (r.cpu_millis * n, r.memory_bytes * n, r.gpus * n, r.tpus * n), (), (start,))
            else:
                columns = (job.job_id, (r.cpu_millis, r.memory_bytes, r.gpus, r.tpus), indices, starts)
            jobs.append(columns)
            over_jobs.append((team, columns, worker_ids))
        row_or_none: Callable[[str], int | None] = row_of.get
        for team, ids in workers_of_team.items():
            rows = set(map(row_or_none, ids))
            rows.discard(None)  # a task on a worker no longer in the snapshot
            rows_of_team[team] = cast(set[int], rows)
        self.borrowed = borrowed = borrowed_units(by_team, teams.teams)
        for gangs in self.gangs_on_row.values():
            for gang in gangs:
                if not gang.team:
                    gang.team = team = team_by_job.get(gang.job_id, "")
                    gang.borrowed = borrowed(team, gang.job_id, gang_start.get(gang.job_id, 0.0), -1)
        rows = set(map(row_or_none, _borrowed_workers(borrowed, over_jobs)))
        rows.discard(None)
        self._borrowed_rows = cast(set[int], rows)

    def _eligible(self, unit: Unit, rank: int, chosen: dict[str, list[int]] | None = None) -> bool:
        """Whether the search under way may evict `unit` (band rule; with teams, the reclaim rules too)."""
        if unit.evicted:
            return False
        ctx = self.ctx
        if ctx is None or self.teams is None:
            return unit.rank < rank
        team, turn = ctx
        if unit.team == team:
            return unit.rank < rank  # inside a team, bands decide
        if turn is Turn.OWN or not unit.borrowed or not (turn is Turn.WITHIN or unit.rank < rank):
            return False
        minus = chosen.get(unit.team) if chosen else None
        if turn is Turn.BEYOND:  # borrowed work takes the place of borrowed work only: nothing borrowed grows
            return self.teams.borrowed_whole(unit.team, minus or (0, 0, 0, 0), unit.usage())
        return self.teams.still_over(unit.team, minus or (0, 0, 0, 0))

    def units_on(self, row: int) -> list[Unit]:
        """The units running on a worker, cheapest first (built and sorted on first use)."""
        units = self.on_row.get(row)
        if units is not None:
            return units
        units = list(self.gangs_on_row.get(row, ()))
        per_hour, now = self.per_hour, self.share.now
        teams = self.teams is not None
        cuts = self.borrowed.cuts  # a team with no cut has nothing borrowed
        rows = (row,)  # shared by the row's plain units, as their task indices are by all units of one index
        singles = self._singles
        for job, task, rank in self.plain_on.get(self.state.workers[row].worker_id, ()):
            rate = per_hour.get(job.job_id)
            if rate is None:
                rate = per_hour[job.job_id] = self.share.policy.rates.per_hour(job.request)
            lost = rate * max(0.0, now - task.started_at) / 3600
            indices = singles.get(task.task_index)
            if indices is None:
                indices = singles[task.task_index] = (task.task_index,)
            unit = Unit(job.job_id, job.band, rank, indices, rows, job.request, lost)
            if teams:  # its team, and whether it is borrowed (use_teams)
                unit.team = team = self.team_by_job.get(job.job_id, "")
                unit.borrowed = team in cuts and self.borrowed(team, job.job_id, task.started_at, task.task_index)
            units.append(unit)
        units.sort(key=cheapest_first)
        self.on_row[row] = units
        return units

    def search_rows(self) -> set[int]:
        """The rows where the search under way may find a victim: every row with a unit; with teams, the
        rows of the searching team's own units and of borrowed units (no other unit is eligible, `_eligible`)."""
        if self.ctx is None or self.teams is None:
            return self.rows_with_units()
        team, turn = self.ctx
        if turn is Turn.OWN:
            return self._rows_of_team.get(team, set())
        rows = self._search_rows.get(team)
        if rows is None:  # the same all pass long (a superset once units are evicted)
            rows = self._search_rows[team] = self._rows_of_team.get(team, set()) | self._borrowed_rows
        return rows

    def rows_with_units(self) -> set[int]:
        """Every worker row that runs an evictable unit."""
        if self._rows_with_units is None:  # the same all pass long: units are marked evicted, never removed
            row_of = self.row_of
            self._rows_with_units = set(self.gangs_on_row).union(row_of[w] for w in self.plain_on if w in row_of)
        return self._rows_with_units

    def may_evict_for(self, rank: int) -> bool:
        """Whether any running unit is of a band strictly below `rank` (with teams, a job within its quota may
        reclaim any band but production)."""
        if self.ctx is not None and self.ctx[1] is Turn.WITHIN:
            return self.has_units
        return self.min_rank < rank

    def memo(self, bucket: object, rank: int) -> tuple[object, ...]:
        """The key of a search's memos: the bucket, the preemptor's rank and, with teams, its context."""
        return (id(bucket), rank, self.ctx)

    # -- the autoscaler first -------------------------------------------------

    def headroom_for(self, job: PendingJob, indices: Sequence[int]) -> str | None:
        """Claim autoscaler headroom that hosts all of `indices`; the group's name, or None."""
        for group in self.share.headroom:
            left = self.slices_left.get(group.group, 0)
            if left <= 0:
                continue
            key = (group.group, job.request, job.constraints, job.group_by, job.tolerations,
                   len(indices) if job.group_by else 0)
            per_slice = self.trials.get(key)
            if per_slice is None:  # a plain probe asks for more than any slice holds, so it measures the slice
                probe_indices = tuple(indices) if job.group_by else tuple(range(PROBE_TASKS))
                probe = replace(job, task_indices=probe_indices, waited_seconds=0.0, scheduling_timeout_seconds=None)
                per_slice = self.trials[key] = self.placed(group.hosts, probe)  # on an empty new slice
            if per_slice == 0 or (job.group_by and per_slice < len(indices)):
                continue
            need = 1 if job.group_by else math.ceil(len(indices) / per_slice)
            if need <= left:
                self.slices_left[group.group] = left - need
                return group.group
        return None

    # -- fit checks -----------------------------------------------------------

    def _fits(self, row: int, request: Resources, extra: dict[int, Extra]) -> bool:
        state = self.state
        if state.reserved[row]:
            return False
        e = extra.get(row)
        if self.freed_only:
            return e is not None and (
                e[0] >= request.cpu_millis and e[1] >= request.memory_bytes and e[2] >= request.gpus
                and e[3] >= request.tpus
            )  # fmt: skip
        if e is None:
            return (
                state.free_cpu[row] >= request.cpu_millis
                and state.free_mem[row] >= request.memory_bytes
                and state.free_gpu[row] >= request.gpus
                and state.free_tpu[row] >= request.tpus
            )
        return (
            state.free_cpu[row] + e[0] >= request.cpu_millis
            and state.free_mem[row] + e[1] >= request.memory_bytes
            and state.free_gpu[row] + e[2] >= request.gpus
            and state.free_tpu[row] + e[3] >= request.tpus
        )

    def _take(self, row: int, request: Resources, extra: dict[int, Extra]) -> None:
        """The preemptor takes `request` on `row`: first from what its victims free, the rest from free now."""
        e = extra.get(row) or [0, 0, 0, 0]
        wanted = (request.cpu_millis, request.memory_bytes, request.gpus, request.tpus)
        from_free = [max(0, w - got) for w, got in zip(wanted, e, strict=True)]
        for d in range(4):
            e[d] = max(0, e[d] - wanted[d])
        if row in extra:
            extra[row] = e
        self.state.take(row, *from_free)

    def _evict(self, units: Sequence[Unit], preemptor: PendingJob, rank: int) -> None:
        """Mark units evicted for `preemptor` (of band rank `rank`); with teams, they stop counting on their team."""
        ctx, teams = self.ctx, self.teams
        for unit in units:
            unit.evicted = True
            reclaim = ctx[0] if ctx is not None and unit.team != ctx[0] else ""
            self.victims.append((unit, preemptor.job_id, rank, reclaim))
            if teams is not None and unit.team:
                teams.evicted(unit.team, unit.usage())
                self.evicted_teams.add(unit.team)

    def plan(self) -> tuple[Eviction, ...]:
        """The evictions of the pass, one per (victim job, preemptor), task indices sorted."""
        merged: dict[tuple[str, str], tuple[Unit, int, str, list[int]]] = {}
        for unit, preemptor, rank, reclaim in self.victims:
            found = merged.get((unit.job_id, preemptor))
            if found is None:
                merged[unit.job_id, preemptor] = (unit, rank, reclaim, list(unit.indices))
            else:
                found[3].extend(unit.indices)
        band_of = {rank: band for band, rank in BAND_RANK.items()}
        return tuple(
            Eviction(
                job_id,
                tuple(sorted(indices)),
                unit.band,
                preemptor,
                f"capacity borrowed by team {unit.team} reclaimed by team {reclaim} for job {preemptor}"
                if reclaim and unit.borrowed
                else f"preempted by {band_of[rank]} job {preemptor}",
            )
            for (job_id, preemptor), (unit, rank, reclaim, indices) in merged.items()
        )

    # -- gangs ----------------------------------------------------------------

    def for_gang(self, job: PendingJob, bucket: GangBucket, rank: int) -> list[Unit] | None:
        """Evict the cheapest victims that let the gang fit in one group and place it; the victims, or None."""
        need = len(job.task_indices)
        memo = self.memo(bucket, rank)
        if need >= self.gang_failed.get(memo, 1 << 62):
            return None
        heap = self.gang_heaps.get((memo, need))
        if heap is None:
            heap = []
            for position, group in enumerate(bucket.all_groups):
                if len(group.members) >= need:
                    floor = self._group_floor(group, bucket.request, need, rank)
                    if floor is not None:
                        heap.append((floor, position))
            heapq.heapify(heap)
            self.gang_heaps[memo, need] = heap
        best: tuple[Cost, GroupCandidate, list[Unit], dict[int, Extra]] | None = None
        chosen = -1
        # Lazy: a stored cost is a floor (`_group_floor`, or the group's cost when stored) and costs only rise in
        # a pass, so the group on top whose cost now is what it stored is the cheapest (ties: the lower position).
        while heap:
            cost, position = heap[0]
            group = bucket.all_groups[position]
            found = self._gang_in_group(group, bucket.request, need, rank)
            if found is None:
                heapq.heappop(heap)
            elif found[0] <= cost:
                heapq.heappop(heap)
                best, chosen = (found[0], group, found[1], found[2]), position
                break
            else:
                heapq.heapreplace(heap, (found[0], position))
        if best is None:
            self.gang_failed[memo] = need
            return None
        _, group, victims, extra = best
        rows = [row for row in group.members if self._fits(row, bucket.request, extra)][:need]
        state = self.state
        for index, row in zip(sorted(job.task_indices), rows, strict=True):
            self._take(row, bucket.request, extra)
            state.assignments.append(Assignment(job.job_id, index, state.workers[row].worker_id))
        self._evict(victims, job, rank)
        again = self._gang_in_group(group, bucket.request, need, rank)  # a big group may host another gang
        if again is not None:
            heapq.heappush(heap, (again[0], chosen))
        return victims

    def _group_floor(self, group: GroupCandidate, request: Resources, need: int, rank: int) -> Cost | None:
        """A bound below the group's cost (`_gang_in_group`) without choosing its victims, or None if it has none.

        As for a row (`_row_floor`): any victims chosen cost at least the cheapest eligible unit alone, and
        none are needed where `need` members fit already. Most groups are never reached by the search."""
        if self.ctx is not None and self.teams is not None and self.search_rows().isdisjoint(group.members):
            return None
        cheapest: Cost | None = None
        for row in group.members:
            for unit in self.units_on(row):  # cheapest first: the first eligible one is the row's least
                if self._eligible(unit, rank):
                    cost = (unit.rank, unit.lost, len(unit.indices))
                    if cheapest is None or cost < cheapest:
                        cheapest = cost
                    break
        if cheapest is None:
            return None
        fits = self._fits
        if sum(1 for row in group.members if fits(row, request, {})) >= need:
            return (-1, 0.0, 0)
        return cheapest

    def _gang_in_group(
        self, group: GroupCandidate, request: Resources, need: int, rank: int
    ) -> tuple[Cost, list[Unit], dict[int, Extra]] | None:
        """Greedy-then-prune victim set that frees `need` fitting members of one group, or None."""
        if self.ctx is not None and self.teams is not None and self.search_rows().isdisjoint(group.members):
            return None  # no unit there the search may evict
        seen: dict[int, Unit] = {}
        for row in group.members:
            for unit in self.units_on(row):
                if self._eligible(unit, rank):
                    seen[id(unit)] = unit
        if not seen:
            return None
        members = group.members
        extra: dict[int, Extra] = {}
        fitting = sum(1 for row in members if self._fits(row, request, extra))
        chosen: list[Unit] = []
        taken: dict[str, list[int]] | None = {} if self.ctx is not None else None
        for unit in sorted(seen.values(), key=cheapest_first):
            if fitting >= need:
                break
            touched = set(unit.rows).intersection(members)
            if not touched:
                continue
            if taken is not None and not self._choose(unit, rank, taken):
                continue
            before = sum(1 for row in touched if self._fits(row, request, extra))
            _add(extra, unit, 1)
            fitting += sum(1 for row in touched if self._fits(row, request, extra)) - before
            chosen.append(unit)
        if fitting < need:
            return None
        for unit in reversed(chosen[:-1]):  # the last one was needed, or the loop would have stopped before it
            touched = set(unit.rows).intersection(members)
            before = sum(1 for row in touched if self._fits(row, request, extra))
            _add(extra, unit, -1)
            after = sum(1 for row in touched if self._fits(row, request, extra))
            if fitting - before + after >= need:
                fitting += after - before
                chosen.remove(unit)
            else:
                _add(extra, unit, 1)
        return _cost(chosen), chosen, extra

    def _choose(self, unit: Unit, rank: int, taken: dict[str, list[int]]) -> bool:
        """Whether a search may add `unit` to the victims it chose so far (`taken`: their usage per team);
        counts it in when so. Another team's unit goes only while that team stays over its quota."""
        if self.ctx is not None and unit.team != self.ctx[0] and not self._eligible(unit, rank, taken):
            return False
        self._count_in(unit, taken)
        return True

    @staticmethod
    def _count_in(unit: Unit, taken: dict[str, list[int]]) -> None:
        """Add the unit's usage to its team's in `taken` (the victims a search chose so far, per team)."""
        usage = unit.usage()
        found = taken.get(unit.team)
        if found is None:
            taken[unit.team] = usage
        else:
            for d in range(4):
                found[d] += usage[d]

    # -- plain tasks ----------------------------------------------------------

    def for_plain(self, job: PendingJob, bucket: PlainBucket, rank: int, indices: Sequence[int]) -> list[Unit]:
        """Place what eviction can of a plain job's `indices`, task by task, cheapest worker first; the victims."""
        memo = self.memo(bucket, rank)
        if memo in self.plain_failed:
            return []
        state = self.state
        feasible = state.rows(bucket.feasibility)
        request = bucket.request
        pool: dict[int, Extra] = {}  # capacity this job's victims free, usable by this job only
        victims: list[Unit] = []
        heap = self.plain_heaps.get(memo)
        if heap is None:
            heap = self.plain_heaps[memo] = []
            for row in self.search_rows() & feasible:
                floor = self._row_floor(row, request, rank)
                if floor is not None:
                    heap.append((floor, row))
            heapq.heapify(heap)
        for index in indices:
            row = next((r for r in pool if r in feasible and self._fits(r, request, pool)), -1)
            if row < 0:
                cheapest = self._cheapest_row(heap, request, rank)
                if cheapest is None:
                    self.plain_failed.add(memo)
                    break
                row, found = cheapest
                for unit in found[1]:
                    _add(pool, unit, 1)
                self._evict(found[1], job, rank)
                victims.extend(found[1])
            self._take(row, request, pool)
            state.assignments.append(Assignment(job.job_id, index, state.workers[row].worker_id))
        return victims

    def _cheapest_row(
        self, heap: list[tuple[Cost, int]], request: Resources, rank: int
    ) -> tuple[int, tuple[Cost, list[Unit]]] | None:
        """The row whose victims cost least now, and them; None if no row has any.

        A stored cost is a floor: a row's cost when stored or a bound below it (`_row_floor`), and costs only
        rise in a pass. So the row on top is taken once its cost now is what it stored: every other row's cost
        is at least its stored one, which is no less. Ties go to the lower row, as if every cost were exact."""
        while heap:
            cost, row = heap[0]
            now = self._row_cost(row, request, rank)
            if now is None:
                heapq.heappop(heap)
            elif now[0] == cost:
                heapq.heappop(heap)
                return row, now
            else:
                heapq.heapreplace(heap, (now[0], row))
        return None

    def _row_floor(self, row: int, request: Resources, rank: int) -> Cost | None:
        """A bound below the row's cost (`_row_cost`) without choosing its victims, or None if it has none.

        Units are sorted cheapest first (band rank, credits lost, tasks), so any victims the search could choose
        cost at least the first eligible unit alone: a higher rank, or as many credits and tasks or more. Most
        rows are never reached by the search; theirs stays a bound."""
        if self.state.reserved[row]:
            return None
        if self._fits(row, request, {}):
            return (-1, 0.0, 0)
        for unit in self.units_on(row):
            if self._eligible(unit, rank):
                return (unit.rank, unit.lost, len(unit.indices))
        return None

    def _row_cost(self, row: int, request: Resources, rank: int) -> tuple[Cost, list[Unit]] | None:
        """Greedy-then-prune victims on one worker that make one task fit there, or None."""
        if self.state.reserved[row]:
            return None
        extra: dict[int, Extra] = {}
        if self._fits(row, request, extra):
            return (-1, 0.0, 0), []  # room without eviction (freed by an earlier eviction's leftovers)
        chosen: list[Unit] = []
        taken: dict[str, list[int]] | None = {} if self.ctx is not None else None
        for unit in self.units_on(row):
            if not self._eligible(unit, rank, taken):  # with teams, also against what was chosen so far
                continue
            if taken is not None:
                self._count_in(unit, taken)
            _add(extra, unit, 1)
            chosen.append(unit)
            if self._fits(row, request, extra):
                break
        else:
            return None
        for unit in reversed(chosen[:-1]):
            _add(extra, unit, -1)
            if self._fits(row, request, extra):
                chosen.remove(unit)
            else:
                _add(extra, unit, 1)
        return _cost(chosen), chosen


def describe(victims: Sequence[Unit]) -> str:
    """The preemptor's pending reason: "evicting 2 batch tasks of ana/sweep-3, 1 interactive task of bob/x"."""
    counts: dict[tuple[str, str], int] = {}
    for unit in victims:
        key = (str(unit.band), unit.job_id)
        counts[key] = counts.get(key, 0) + len(unit.indices)
    parts = [
        f"{n} {band} task{'s' if n != 1 else ''} of {job_id}" for (band, job_id), n in counts.items()
    ]
    return "evicting " + ", ".join(parts)
