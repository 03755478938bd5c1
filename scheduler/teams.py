"""Teams and quotas: guaranteed capacity per team, borrowing what others leave idle, and reclaiming it.

The rules (decided here and in the pass, carried out by the workflows)
-----------------------------------------------------------------------
- **Teams.** A team has members, a guaranteed `quota` (cpu, memory, gpus, tpu
  chips), an optional `borrowing_limit` (how much beyond its quota it may use;
  None: no limit) and an optional `lending_limit` (how much of its unused quota
  others may use; None: all of it). A user belongs to at most one team; a user
  in none is in the team `default`, whose quota is zero (a cluster config
  refuses a team of that name). Only the resources some team has a quota of are
  accounted ("covered" resources, as Kueue calls them): a config that gives
  quotas in cpu only does not make every job borrow memory.
- **Quota first.** A pass walks the queue twice. First every team's work that
  fits in its own quota (its running work plus what the pass placed for it
  stays within the quota), in the usual order (band, fair share, submission);
  a plain job may place part of its tasks there. Then the rest, borrowed work,
  in the same order, each job only as far as its team's borrowing limit and
  the capacity that may be borrowed allow. So a team's work within its quota
  always runs before any other team's borrowed work. A team that a reclaim
  earlier in the pass brought back within its quota gets its deferred work's
  within-quota turn in the same pass, before anything borrows (and again
  whenever the borrowing walk evicts more): it does not wait a pass behind
  its own evicted gang while others keep what they borrowed.
- **What may be borrowed.** Capacity no quota covers (the fleet's total beyond
  the sum of quotas) plus, per team, its unused quota up to its lending limit,
  less what is borrowed already.
- **Which running work is borrowed.** A team's running units (a whole gang, or
  one task of a plain job), oldest first, count against its quota; the first
  unit that takes the team beyond its quota, and every newer one, is borrowed.
  A team therefore never loses its oldest work within its quota to a reclaim.
- **Reclaim.** A job that fits in its team's quota and finds no free room may
  evict other teams' borrowed units, whatever their band except `production`,
  through the same gang-aware search as band preemption
  (`scheduler.preemption`): whole gangs, only when that makes the job fit, and
  a team is evicted only while it is still over its quota (so reclaim stops
  once the borrower is back within it). Inside a team, bands decide as before:
  a job may evict its own team's work of a strictly lower band, also when the
  team is at its quota (then only where what it evicts frees room enough, so
  the team's use does not grow: `Turn.OWN`). Borrowed work may evict only
  units borrowed whole (of a lower band: not a gang the quota's edge runs
  through), never work within a quota, so what is borrowed in all does not grow.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not, mul, sub

from scheduler.types import BAND_RANK, Band, Resources, WorkerSnapshot

DEFAULT_TEAM = "default"
DIMENSIONS = ("cpu", "memory", "gpus", "tpu")  # the config's keys, in Resources' order
_FIELDS = ("cpu_millis", "memory_bytes", "gpus", "tpus")  # Resources' fields, in that order
# A limit's value for a resource it does not name, per dimension (gpus and tpus travel as int32).
UNLIMITED = (1 << 62, 1 << 62, (1 << 31) - 1, (1 << 31) - 1)
Vector = list[int]


def vector(r: Resources) -> Vector:
    """A resource vector as a mutable list (cpu millis, memory bytes, gpus, tpu chips)."""
    return [r.cpu_millis, r.memory_bytes, r.gpus, r.tpus]


@dataclass(frozen=True, slots=True)
class Team:
    """One team: who is in it, what it is guaranteed, how far it may borrow and lend."""

    name: str
    members: tuple[str, ...] = ()
    quota: Resources = Resources()  # noqa: RUF009 - frozen, so one shared default is safe
    borrowing_limit: Resources | None = None  # None: no limit
    lending_limit: Resources | None = None  # None: all of its unused quota

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"team name must be a non-empty string, got {self.name!r}")
        if not all(isinstance(m, str) and m for m in self.members):
            raise ValueError(f"team {self.name}: members must be non-empty strings, got {list(self.members)!r}")
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"team {self.name}: a member is listed twice")


@dataclass(frozen=True, slots=True)
class Teams:
    """Every configured team and who is in which; validated at construction."""

    teams: tuple[Team, ...] = ()
    team_of_user: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        names: set[str] = set()
        members: dict[str, str] = {}
        for team in self.teams:
            if team.name in names:
                raise ValueError(f"teams: {team.name!r} is defined twice")
            names.add(team.name)
            for user in team.members:
                if user in members:
                    raise ValueError(f"teams: {user!r} is a member of both {members[user]!r} and {team.name!r}")
                members[user] = team.name
        object.__setattr__(self, "team_of_user", members)

    def __bool__(self) -> bool:
        return bool(self.teams)

    def team_of(self, user: str) -> str:
        """The user's team: the one that lists them, else `default`."""
        return self.team_of_user.get(user, DEFAULT_TEAM)

    def get(self, name: str) -> Team:
        """The team of that name; `default` (zero quota, no limits) when none is configured so."""
        for team in self.teams:
            if team.name == name:
                return team
        return Team(DEFAULT_TEAM if name == DEFAULT_TEAM else name)

    def names(self, extra: Iterable[str] = ()) -> list[str]:
        """Configured teams in config order, then `default` and any other name seen, sorted."""
        out = [t.name for t in self.teams]
        rest = sorted(set(extra) - set(out))
        return out + rest

    def covered(self) -> tuple[bool, bool, bool, bool]:
        """Which dimensions some team has a quota of: only these are accounted."""
        totals = [0, 0, 0, 0]
        for team in self.teams:
            for d, value in enumerate(vector(team.quota)):
                totals[d] += value
        return tuple(value > 0 for value in totals)  # type: ignore[return-value]


NO_TEAMS = Teams()


# A running job of a team, as columns: its id, one unit's usage (cpu, memory, gpus, tpus), its units' task
# indices and their starts. A gang is one unit: no indices, its whole usage, the start of its first task.
RunningColumns = tuple[str, tuple[int, int, int, int], tuple[int, ...], tuple[float, ...]]


def over(used: Sequence[int], limit: Sequence[int], covered: Sequence[bool]) -> bool:
    """Whether `used` exceeds `limit` in any covered dimension."""
    return any(c and u > q for u, q, c in zip(used, limit, covered, strict=True))


@dataclass(slots=True)
class Borrowed:
    """Which running units are borrowed: per team, every entry after its cut (started, job id), and of
    the entry at the cut, all of it (`whole`: a gang) or the tasks in `some` (job id, task index)."""

    cuts: dict[str, tuple[float, str]] = field(default_factory=dict)
    whole: set[tuple[str, float]] = field(default_factory=set)
    some: set[tuple[str, int]] = field(default_factory=set)

    def __call__(self, team: str, job_id: str, started: float, task_index: int) -> bool:
        cut = self.cuts.get(team)
        if cut is None:
            return False
        key = (started, job_id)
        if key != cut:
            return key > cut
        return (job_id, started) in self.whole or (job_id, task_index) in self.some


def borrowed_units(jobs_by_team: Mapping[str, list[RunningColumns]], teams: Teams) -> Borrowed:
    """Each team's borrowed units, oldest first (start, then job id, then task index): the one that takes the
    team beyond its quota and every newer one.

    Found without an entry per running task (a team far over its quota runs thousands; their tuples cost more
    in collections than in building): the cut's start is bisected over the team's starts (the usage up to a
    start is summed per job by bisecting its own sorted starts), then the jobs with a unit at that start are
    walked in job id order, and of the one that crosses, the tasks in index order."""
    dims = [d for d, c in enumerate(teams.covered()) if c]
    out = Borrowed()
    for name, jobs in jobs_by_team.items():
        if not jobs or not dims:
            continue
        quota = vector(teams.get(name).quota)
        starts_of = [sorted(starts) for _, _, _, starts in jobs]  # per job, its units' starts in order
        usage_of = [[usage[d] for _, usage, _, _ in jobs] for d in range(4)]  # per dimension, per job, one unit's
        points = sorted(set(chain.from_iterable(starts_of)))
        lo, hi = 0, len(points)  # the first start by which the team's units exceed its quota
        while lo < hi:
            mid = (lo + hi) // 2
            counts = list(map(bisect_right, starts_of, repeat(points[mid])))  # each job's units started by then
            if any(sum(map(mul, usage_of[d], counts)) > quota[d] for d in dims):
                hi = mid
            else:
                lo = mid + 1
        if lo == len(points):
            continue  # within its quota after all
        start = points[lo]
        before = list(map(bisect_left, starts_of, repeat(start)))  # each job's units started before it
        used = [sum(map(mul, usage_of[d], before)) for d in range(4)]
        started_then = map(sub, map(bisect_right, starts_of, repeat(start)), before)  # each job's units started at it
        for job_id, usage, indices, starts in sorted(compress(jobs, started_then)):
            at = [i for i, s in zip(indices or (-1,), starts, strict=True) if s == start]
            fits = len(at)
            for d in dims:
                if usage[d]:
                    fits = min(fits, (quota[d] - used[d]) // usage[d])
            if fits < len(at):
                out.cuts[name] = (start, job_id)
                if indices:
                    out.some.update((job_id, index) for index in sorted(at)[fits:])
                else:
                    out.whole.add((job_id, start))
                break
            for d in dims:
                used[d] += usage[d] * len(at)
    return out


class _TeamOf(dict[str, str]):
    """User -> team, `default` for a user no team lists (`Teams.team_of`, looked up in C for a member)."""

    def __missing__(self, user: str) -> str:
        return DEFAULT_TEAM


class TeamPass:
    """Team accounting of one pass: usage per team, the borrowing pool, what each job may place.

    `used` starts from the running work the snapshot lists and grows with every task the pass
    places and shrinks with every unit it evicts; the pass asks `within_quota` and `borrow_room`
    before it places a job and tells `placed` / `evicted` afterwards.
    """

    def __init__(
        self, teams: Teams, workers: Sequence[WorkerSnapshot], running: Iterable[tuple[str, str, Resources, int]]
    ) -> None:
        """`running`: (job id, user, request, tasks) of the running work counted against quotas."""
        self.teams = teams
        self.team_of = _TeamOf(teams.team_of_user).__getitem__  # the user's team: asked for every job of the pass
        self.covered = teams.covered()
        self.used: dict[str, Vector] = {}
        self.quota: dict[str, Vector] = {}
        self.limit: dict[str, Vector | None] = {}
        for team in teams.teams:
            self._team(team.name)
        team_of, by_team = self.team_of, self.used
        for _, user, request, count in running:
            name = team_of(user)
            used = by_team.get(name) or self._team(name)
            used[0] += request.cpu_millis * count
            used[1] += request.memory_bytes * count
            used[2] += request.gpus * count
            used[3] += request.tpus * count
        # A worker's size is its capacity, or what is free where none is known; summed in C (ten thousand
        # workers are one pass each). `None in sizes` would call each Resources' __eq__.
        sizes = list(map(attrgetter("capacity"), workers))
        unknown = list(map(partial(is_, None), sizes))
        if any(unknown):
            sizes = [*compress(map(attrgetter("free"), workers), unknown), *filter(partial(is_not, None), sizes)]
        self.fleet = [sum(map(attrgetter(name), sizes)) for name in ("cpu_millis", "memory_bytes", "gpus", "tpus")]
        self.dims = [d for d, c in enumerate(self.covered) if c]
        # Each covered dimension with how to read it from a request.
        self._covered_amounts = [(d, attrgetter(_FIELDS[d])) for d in self.dims]
        self.available: Vector | None = None  # what may still be borrowed; set when the borrowing walk starts

    def _team(self, name: str) -> Vector:
        used = self.used.get(name)
        if used is None:
            team = self.teams.get(name)
            used = self.used[name] = [0, 0, 0, 0]
            self.quota[name] = vector(team.quota)
            self.limit[name] = vector(team.borrowing_limit) if team.borrowing_limit is not None else None
        return used


    def over_quota(self, team: str) -> bool:
        """Whether the team uses more than its quota in a covered dimension now."""
        return over(self._team(team), self.quota[team], self.covered)

    def within_quota(self, team: str, request: Resources, count: int) -> int:
        """How many of `count` tasks of `request` fit in the team's quota on top of what it uses."""
        used = self.used.get(team) or self._team(team)
        quota = self.quota[team]
        n = count
        for d, amount in self._covered_amounts:  # asked for every job of the pass
            r = amount(request)
            if r:
                room = quota[d] - used[d]
                if room < r * n:
                    n = room // r if room > 0 else 0
        return n

    def beyond(self, team: str, request: Resources, count: int) -> str:
        """The resources in which `count` tasks of `request` do not fit the team's quota ("memory", "cpu, memory")."""
        used, quota = self._team(team), self.quota[team]
        return ", ".join(DIMENSIONS[d] for d, amount in self._covered_amounts
                         if amount(request) and quota[d] - used[d] < amount(request) * count)  # fmt: skip

    def start_borrowing(self) -> None:
        """Set up the borrowing walk, once every team's work within its quota was placed.

        What team T may still borrow is the capacity no quota covers, plus every *other* team's idle
        quota up to its lending limit, less what all teams borrow beyond their quotas; T's own idle
        quota is its own, not a loan. The sums over teams (`lendable`, `borrowed`) are kept as the walk
        places and evicts, so each question is a few additions.
        """
        quotas = [0, 0, 0, 0]
        for team in self.teams.teams:
            for d, value in enumerate(vector(team.quota)):
                quotas[d] += value
        self.unquoted = [max(0, f - q) for f, q in zip(self.fleet, quotas, strict=True)]
        self.lend_cap: dict[str, Vector | None] = {}
        self.lendable = [0, 0, 0, 0]
        self.borrowed = [0, 0, 0, 0]
        for name in self.used:
            self._count(name, 1)
        self.available = [0, 0, 0, 0]  # marks the walk as started

    def _lend_cap(self, name: str) -> Vector | None:
        if name not in self.lend_cap:
            lend = self.teams.get(name).lending_limit
            self.lend_cap[name] = vector(lend) if lend is not None else None
        return self.lend_cap[name]

    def _count(self, name: str, sign: int) -> None:
        """Add (sign 1) or take out (-1) the team's share of the sums over teams: what it lends (its idle quota,
        up to its lending limit) and what it borrows. Called twice for every placement of the borrowing walk,
        so written out, and only in the dimensions some quota covers (the only ones `borrow_room` reads)."""
        used, quota = self._team(name), self.quota[name]
        cap = self._lend_cap(name)
        lendable, borrowed = self.lendable, self.borrowed
        for d in self.dims:
            u, q = used[d], quota[d]
            if u < q:
                idle = q - u
                if cap is not None and cap[d] < idle:
                    idle = cap[d]
                lendable[d] += sign * idle
            elif u > q:
                borrowed[d] += sign * (u - q)

    def borrow_room(self, team: str, request: Resources, count: int) -> tuple[int, str]:
        """How many of `count` tasks the team may place beyond its quota now, and why not more ("" if all)."""
        assert self.available is not None, "start_borrowing first"
        used, quota, limit = self._team(team), self.quota[team], self.limit[team]
        lend_cap = self._lend_cap(team)
        req = vector(request)
        n = count
        why = ""
        for d in self.dims:
            r = req[d]
            if not r:
                continue
            u, q = used[d], quota[d]
            own = q - u if u < q else 0  # T's own idle quota (to its lending limit) is in `lendable`: not a loan
            if lend_cap is not None and lend_cap[d] < own:
                own = lend_cap[d]
            mine = u - q if u > q else 0
            # beyond its quota T may reach what others lend, less what the others borrow already
            cap = q + self.unquoted[d] + self.lendable[d] - own - (self.borrowed[d] - mine)
            short = "no idle quota left to borrow"
            if limit is not None and quota[d] + limit[d] < cap:
                cap, short = quota[d] + limit[d], f"team {team} is at its borrowing limit"
            room = cap - used[d]
            fits = room // r if room > 0 else 0
            if fits < n:
                n, why = max(0, fits), f"{short} ({DIMENSIONS[d]})"
        return n, why

    def limit_room(self, team: str, request: Resources, count: int) -> int:
        """How many of `count` tasks the team's borrowing limit alone lets it place on top of what it uses."""
        limit = self.limit[team]
        if limit is None:
            return count
        used, quota, req = self._team(team), self.quota[team], vector(request)
        n = count
        for d in self.dims:
            if req[d]:
                room = quota[d] + limit[d] - used[d]
                n = min(n, room // req[d] if room > 0 else 0)
        return n

    def placed(self, team: str, request: Resources, count: int) -> None:
        """Count `count` tasks of `request` placed for the team (and, once borrowing started, the sums)."""
        used = self.used.get(team) or self._team(team)
        if self.available is None:  # the walk within quotas: the sums over teams are not kept yet
            used[0] += request.cpu_millis * count
            used[1] += request.memory_bytes * count
            used[2] += request.gpus * count
            used[3] += request.tpus * count
            return
        self._count(team, -1)
        used[0] += request.cpu_millis * count
        used[1] += request.memory_bytes * count
        used[2] += request.gpus * count
        used[3] += request.tpus * count
        self._count(team, 1)

    def evicted(self, team: str, usage: Sequence[int]) -> None:
        """A unit of the team is evicted: it no longer counts against its quota (nor the sums)."""
        used = self._team(team)
        walking = self.available is not None
        if walking:
            self._count(team, -1)
        for d in range(4):
            used[d] -= usage[d]
        if walking:
            self._count(team, 1)

    def still_over(self, team: str, minus: Sequence[int]) -> bool:
        """Whether the team is over its quota even without `minus` (units chosen but not yet evicted)."""
        used, quota = self.used.get(team) or self._team(team), self.quota[team]
        for d in self.dims:  # noqa: SIM110 - a loop, not any() of a generator: asked for each unit a reclaim weighs
            if used[d] - minus[d] > quota[d]:
                return True
        return False

    def borrowed_whole(self, team: str, minus: Sequence[int], usage: Sequence[int]) -> bool:
        """Whether a unit holding `usage` is borrowed in all it holds: without it (and `minus`, units chosen but
        not yet evicted) the team still uses at least its quota of every covered resource it holds.

        A unit the quota's edge runs through (a gang that took the team beyond it) is partly the team's own:
        evicting it for borrowed work would leave that part idle, lent to the newcomer, and borrowing would grow.
        """
        used, quota = self.used.get(team) or self._team(team), self.quota[team]
        for d in self.dims:  # noqa: SIM110 - asked for each unit a displacement weighs
            if usage[d] and used[d] - minus[d] - usage[d] < quota[d]:
                return False
        return True


PRODUCTION = BAND_RANK[Band.PRODUCTION]
