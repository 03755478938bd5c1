"""Property tests of teams: guarantees are reclaimed, nothing is borrowed beyond limits, no gang is split.

Every host takes exactly one task (each request is a whole host), so "would an eviction make this job
fit" is a count of hosts, and the properties can be checked exactly from the plan.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Band, PendingJob, Resources, RunningJob, RunningTask, ShareSnapshot, WorkerSnapshot
from scheduler import find_assignments as schedule
from scheduler.teams import Team, Teams
from scheduler.types import SchedulingResult

GIB = 1 << 30
HOST = Resources(1000, GIB, 0, 0)  # a task is a whole host: one cpu
NOW = 100_000.0
TEAM_NAMES = ("t0", "t1", "t2")
USERS = ("u0", "u1", "u2", "u3", "loner")  # u{i} is in team t{i}, u3 in t0, loner in none (team default)
MEMBERS = {"t0": ("u0", "u3"), "t1": ("u1",), "t2": ("u2",)}
bands = st.sampled_from([Band.BATCH, Band.INTERACTIVE, Band.INTERACTIVE, Band.PRODUCTION])

Cluster = tuple[list[WorkerSnapshot], list[PendingJob], ShareSnapshot]


@st.composite
def team_clusters(draw: st.DrawFn) -> Cluster:
    """Slices of one-cpu hosts, three teams with quotas (and maybe limits), running work and a queue."""
    slices = [[f"s{s}-w{i}" for i in range(draw(st.integers(1, 4)))] for s in range(draw(st.integers(1, 4)))]
    free = {w: True for ids in slices for w in ids}
    teams = []
    for name in TEAM_NAMES:
        quota = draw(st.integers(0, 5))
        borrow = draw(st.one_of(st.none(), st.integers(0, 4)))
        lend = draw(st.one_of(st.none(), st.integers(0, 4)))
        teams.append(Team(name, MEMBERS[name], Resources(quota * 1000),
                          None if borrow is None else Resources(borrow * 1000),
                          None if lend is None else Resources(lend * 1000)))  # fmt: skip
    runs: list[RunningJob] = []
    for r in range(draw(st.integers(0, 8))):
        user = draw(st.sampled_from(USERS))
        started = NOW - draw(st.integers(1, 50)) * 60.0
        if draw(st.booleans()):  # a gang on some idle hosts of one slice
            ids = [w for w in draw(st.sampled_from(slices)) if free[w]]
            if not ids:
                continue
            ids = ids[: draw(st.integers(1, len(ids)))]
            coscheduled = True
        else:
            idle = [w for w in free if free[w]]
            if not idle:
                continue
            ids = [draw(st.sampled_from(idle))]
            coscheduled = False
        for w in ids:
            free[w] = False
        tasks = tuple(RunningTask(i, w, started) for i, w in enumerate(ids))
        runs.append(RunningJob(f"run-{r}", user, draw(bands), HOST, tasks, coscheduled))
    workers = [
        WorkerSnapshot(w, HOST if free[w] else Resources(0, 0), {"tpu-name": f"s{s}", "tpu-worker-id": i}, HOST)
        for s, ids in enumerate(slices)
        for i, w in enumerate(ids)
    ]
    jobs = []
    for j in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 4))
        gang = draw(st.booleans())
        jobs.append(PendingJob(f"pend-{j}", tuple(range(size)), HOST, group_by="tpu-name" if gang else None,
                               band=draw(bands), user=draw(st.sampled_from(USERS))))  # fmt: skip
    return workers, jobs, ShareSnapshot(now=NOW, running=runs, teams=Teams(tuple(teams)))


def _hosts(r: Resources) -> int:
    return r.cpu_millis // 1000


def _after(cluster: Cluster, result: SchedulingResult) -> tuple[dict[str, int], dict[str, list[RunningJob]]]:
    """Hosts each team holds once the plan is carried out, and each team's running jobs that stay."""
    _, jobs, share = cluster
    teams = share.teams
    evicted = {(e.job_id, i) for e in result.evictions for i in e.task_indices}
    used: dict[str, int] = defaultdict(int)
    stays: dict[str, list[RunningJob]] = defaultdict(list)
    for job in share.running:
        kept = tuple(t for t in job.tasks if (job.job_id, t.task_index) not in evicted)
        used[teams.team_of(job.user)] += len(kept)
        if kept:
            stays[teams.team_of(job.user)].append(RunningJob(job.job_id, job.user, job.band, job.request, kept,
                                                             job.coscheduled))  # fmt: skip
    user_of = {j.job_id: j.user for j in jobs}
    for a in result.assignments:
        used[teams.team_of(user_of[a.job_id])] += 1
    return used, stays


def _borrowed_left(team: str, quota: int, stays: list[RunningJob]) -> list[RunningJob]:
    """The team's remaining non-production units that are borrowed (oldest first beyond its quota)."""
    units = []
    for job in stays:
        if job.coscheduled:
            units.append((min(t.started_at for t in job.tasks), job.job_id, len(job.tasks), job))
        else:
            units.extend((t.started_at, f"{job.job_id}/{t.task_index}", 1, job) for t in job.tasks)
    total, out = 0, []
    for _, _, size, job in sorted(units, key=lambda u: (u[0], u[1])):
        total += size
        if total > quota and job.band != Band.PRODUCTION:
            out.append(job)
    return out


@settings(max_examples=150, deadline=None)
@given(team_clusters())
def test_no_team_waits_below_its_quota_while_others_hold_borrowed_capacity(cluster: Cluster) -> None:
    """A team with a one-host job that fits in its quota and is not placed leaves no other team borrowing."""
    workers, jobs, share = cluster
    result = schedule(workers, jobs, share=share)
    used, stays = _after(cluster, result)
    placed = {a.job_id for a in result.assignments}
    for job in jobs:
        team = share.teams.team_of(job.user)
        quota = _hosts(share.teams.get(team).quota)
        if job.group_by or job.job_id in placed or used[team] + 1 > quota:
            continue
        for other in share.teams.names(stays):
            if other != team:
                left = _borrowed_left(other, _hosts(share.teams.get(other).quota), stays[other])
                assert not left, f"{job.job_id} of {team} waits while {other} borrows {[j.job_id for j in left]}"


@settings(max_examples=150, deadline=None)
@given(team_clusters())
def test_nothing_is_borrowed_beyond_the_limits(cluster: Cluster) -> None:
    """What a pass places never takes a team beyond quota + borrowing limit, nor borrowing beyond what is lent."""
    workers, jobs, share = cluster
    result = schedule(workers, jobs, share=share)
    before, _ = _after(cluster, SchedulingResult())
    after, _ = _after(cluster, result)
    teams = share.teams
    if not any(teams.covered()):
        return  # no team has a quota of anything: nothing is accounted (scheduler.teams: covered resources)
    names = teams.names([*before, *after])
    for name in names:
        team = teams.get(name)
        if team.borrowing_limit is not None:
            cap = _hosts(team.quota) + _hosts(team.borrowing_limit)
            assert after[name] <= max(cap, before[name]), name
    fleet = len(workers)
    quotas = sum(_hosts(t.quota) for t in teams.teams)

    def lendable(used: dict[str, int]) -> int:
        out = max(0, fleet - quotas)
        for t in teams.teams:
            idle = max(0, _hosts(t.quota) - used[t.name])
            out += idle if t.lending_limit is None else min(idle, _hosts(t.lending_limit))
        return out

    def borrowed(used: dict[str, int]) -> int:
        return sum(max(0, used[n] - _hosts(teams.get(n).quota)) for n in names)

    assert borrowed(after) <= max(lendable(after), borrowed(before))


@settings(max_examples=150, deadline=None)
@given(team_clusters())
def test_no_gang_is_split_and_reclaim_spares_production_and_quota(cluster: Cluster) -> None:
    """Gangs are placed and evicted whole; reclaim never takes production, nor a team's work within its quota."""
    workers, jobs, share = cluster
    result = schedule(workers, jobs, share=share)
    by_job = {j.job_id: j for j in jobs}
    groups: dict[str, set[object]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    where = {w.worker_id: w.attributes["tpu-name"] for w in workers}
    for a in result.assignments:
        groups[a.job_id].add(where[a.worker_id])
        counts[a.job_id] += 1
    for job_id, n in counts.items():
        if by_job[job_id].group_by:
            assert n == len(by_job[job_id].task_indices)
            assert len(groups[job_id]) == 1
    running = {r.job_id: r for r in share.running}
    evicted: dict[str, set[int]] = defaultdict(set)
    for e in result.evictions:
        victim = running[e.job_id]
        assert victim.band != Band.PRODUCTION
        evicted[e.job_id] |= set(e.task_indices)
    for job_id, indices in evicted.items():
        if running[job_id].coscheduled:
            assert indices == {t.task_index for t in running[job_id].tasks}
    before, _ = _after(cluster, SchedulingResult())
    reclaimed: dict[str, int] = defaultdict(int)  # the largest unit reclaimed from each team
    reclaimed_hosts: dict[str, int] = defaultdict(int)
    for e in result.evictions:
        if "reclaimed" in e.reason:
            team = share.teams.team_of(running[e.job_id].user)
            reclaimed[team] = max(reclaimed[team], len(e.task_indices) if running[e.job_id].coscheduled else 1)
            reclaimed_hosts[team] += len(e.task_indices)
    for team, largest in reclaimed.items():
        quota = _hosts(share.teams.get(team).quota)
        assert before[team] > quota  # only a team over its quota is reclaimed from
        # and it stops once the team is back within its quota (counting reclaims only: the same pass may
        # also run the team's own higher-band work in place of its lower-band work, inside the team)
        assert before[team] - reclaimed_hosts[team] + largest > quota
