"""Teams and quotas in one pass: quota first, borrowing within limits, reclaim of borrowed work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler import Band, PendingJob, Resources, ShareSnapshot, WorkerSnapshot, find_assignments
from scheduler.sharing import RunningJob, RunningTask
from scheduler.teams import Team, Teams
from tests.scheduler.sched_helpers import GIB, occupied, running

HOST = Resources(1000, GIB, 0, 0)
NOW = 10_000.0


def hosts(slices: int = 2, per_slice: int = 8) -> list[WorkerSnapshot]:
    """`slices` groups of identical one-cpu hosts (tpu-name s0, s1, ...)."""
    return [
        WorkerSnapshot(f"s{s}-w{i}", HOST, {"tpu-name": f"s{s}", "tpu-worker-id": i}, HOST)
        for s in range(slices)
        for i in range(per_slice)
    ]


def two_teams(**limits: Resources | None) -> Teams:
    """Teams a (ana) and b (bo) with 8 cpu each."""
    return Teams((
        Team("a", ("ana",), Resources(8000), limits.get("a_borrow"), limits.get("a_lend")),
        Team("b", ("bo",), Resources(8000), limits.get("b_borrow"), limits.get("b_lend")),
    ))  # fmt: skip


def gang(job_id: str, user: str, size: int = 8, band: Band = Band.INTERACTIVE) -> PendingJob:
    return PendingJob(job_id, tuple(range(size)), HOST, group_by="tpu-name", band=band, user=user)


def plain(job_id: str, user: str, tasks: int = 1, band: Band = Band.INTERACTIVE) -> PendingJob:
    return PendingJob(job_id, tuple(range(tasks)), HOST, band=band, user=user)


def test_a_lender_reclaims_borrowed_gang_whole_and_the_borrower_keeps_its_quota() -> None:
    """A fills 16 hosts with two gangs; B's gang of 8 evicts A's newer (borrowed) gang whole, not the older one."""
    fleet = hosts()
    old = running("a/old", [w for w in fleet if w.worker_id.startswith("s0")], "interactive", "ana", HOST, 100.0)
    new = running("a/new", [w for w in fleet if w.worker_id.startswith("s1")], "interactive", "ana", HOST, 200.0)
    share = ShareSnapshot(now=NOW, running=[old, new], teams=two_teams())
    result = find_assignments(occupied(fleet, old, new), [gang("b/train", "bo", band=Band.BATCH)], share=share)
    assert [(e.job_id, e.task_indices) for e in result.evictions] == [("a/new", tuple(range(8)))]
    assert "reclaimed by team b" in result.evictions[0].reason
    assert {a.worker_id for a in result.assignments} == {f"s1-w{i}" for i in range(8)}
    assert "evicting 8 interactive tasks of a/new" == result.pending_reasons["b/train"]


def test_production_is_never_reclaimed() -> None:
    """Borrowed production work stays; the lender waits with a reason."""
    fleet = hosts()
    old = running("a/old", fleet[:8], "interactive", "ana", HOST, 100.0)
    new = running("a/new", fleet[8:], "production", "ana", HOST, 200.0)
    share = ShareSnapshot(now=NOW, running=[old, new], teams=two_teams())
    result = find_assignments(occupied(fleet, old, new), [gang("b/train", "bo")], share=share)
    assert () == result.evictions
    assert "b/train" in result.pending_reasons


def test_work_within_quota_goes_before_borrowed_work_of_a_higher_band() -> None:
    """With room for one, B's batch job within its quota beats A's production job beyond A's quota."""
    fleet = hosts(1, 9)
    mine = running("a/run", fleet[:8], "production", "ana", HOST, 100.0, coscheduled=False)
    share = ShareSnapshot(now=NOW, running=[mine], teams=two_teams())
    jobs = [plain("a/more", "ana", band=Band.PRODUCTION), plain("b/one", "bo", band=Band.BATCH)]
    result = find_assignments(occupied(fleet, mine), jobs, share=share)
    assert [("b/one", fleet[8].worker_id)] == [(a.job_id, a.worker_id) for a in result.assignments]
    assert () == result.evictions  # a beyond-quota job never evicts work within another team's quota
    assert "beyond team a's quota" in result.pending_reasons["a/more"]


def test_the_reason_names_what_the_quota_lacks_and_what_cannot_be_borrowed() -> None:
    """Only team a has a memory quota, so b's job asking memory is beyond b's quota in memory although its cpu
    fits; a uses its whole quota, so nothing is left to borrow. The reason says both, each with its resource."""
    teams = Teams((Team("a", ("ana",), Resources(8000, 8 * GIB)), Team("b", ("bo",), Resources(8000))))
    fleet = hosts(1, 8)
    mine = running("a/run", fleet, "interactive", "ana", HOST, 100.0, coscheduled=False)
    share = ShareSnapshot(now=NOW, running=[mine], teams=teams)
    result = find_assignments(occupied(fleet, mine), [plain("b/one", "bo")], share=share)
    assert "beyond team b's quota (memory) and no idle quota left to borrow (memory)" == result.pending_reasons["b/one"]


def test_a_starving_borrowed_gang_holds_what_may_be_borrowed_from_smaller_work() -> None:
    """A's idle quota of 4 is all that may be borrowed; dan (no team) borrows 3 of it. eve's gang of 2 (no team
    either) has waited past starvation_after: the 1 left is not enough for it, and dan's next task must not take
    it (else each unit freed goes to a small task and the gang never has 2 at once). A fresh gang holds nothing."""
    fleet = hosts(1, 4)
    teams = Teams((Team("a", ("ana",), Resources(4000)),))
    runs = [running(f"dan/{i}", [w], "interactive", "dan", HOST, 100.0 + i, coscheduled=False)
            for i, w in enumerate(fleet[:3])]  # fmt: skip
    share = ShareSnapshot(now=NOW, running=runs, teams=teams)
    starving = PendingJob("eve/gang", (0, 1), HOST, group_by="tpu-name", user="eve", waited_seconds=7200.0)
    result = find_assignments(occupied(fleet, *runs), [starving, plain("dan/more", "dan")], share=share)
    assert () == result.assignments
    assert "holding what may be borrowed for it" in result.pending_reasons["eve/gang"]
    assert "held for eve/gang" in result.pending_reasons["dan/more"]
    fresh = replace(starving, waited_seconds=10.0)
    result = find_assignments(occupied(fleet, *runs), [fresh, plain("dan/more", "dan")], share=share)
    assert [("dan/more", "s0-w3")] == [(a.job_id, a.worker_id) for a in result.assignments]


def test_borrowing_stops_at_the_borrowing_limit() -> None:
    """A (quota 8, may borrow 3) gets 11 of 16 idle hosts."""
    share = ShareSnapshot(now=NOW, teams=two_teams(a_borrow=Resources(3000)))
    result = find_assignments(hosts(), [plain("a/sweep", "ana", 16)], share=share)
    assert 11 == len(result.assignments)
    assert "borrowing limit (cpu)" in result.pending_reasons["a/sweep"]


def test_lending_stops_at_the_lending_limit() -> None:
    """B lends at most 4 of its idle 8: A gets 12 of 16 hosts."""
    share = ShareSnapshot(now=NOW, teams=two_teams(b_lend=Resources(4000)))
    result = find_assignments(hosts(), [plain("a/sweep", "ana", 16)], share=share)
    assert 12 == len(result.assignments)
    assert "no idle quota left to borrow (cpu)" in result.pending_reasons["a/sweep"]


def test_a_user_in_no_team_runs_on_borrowed_capacity_only() -> None:
    """The default team has no quota: its job uses idle capacity and is reclaimed by a team that needs it."""
    fleet = hosts(1, 8)
    share = ShareSnapshot(now=NOW, teams=two_teams())
    assert 8 == len(find_assignments(fleet, [plain("cy/x", "cy", 8)], share=share).assignments)
    guest = running("cy/x", fleet, "interactive", "cy", HOST, 100.0, coscheduled=False)
    share = ShareSnapshot(now=NOW, running=[guest], teams=two_teams())
    result = find_assignments(occupied(fleet, guest), [plain("ana/y", "ana", 2, band=Band.BATCH)], share=share)
    assert 2 == len(result.assignments)
    assert ["cy/x"] == [e.job_id for e in result.evictions]
    assert 2 == len(result.evictions[0].task_indices)


def test_reclaim_stops_once_the_borrower_is_back_within_its_quota() -> None:
    """A uses 10 of its 8 (2 borrowed); B needs 4: only the 2 borrowed tasks go, B places 2 and waits."""
    fleet = hosts(1, 10)
    work = running("a/run", fleet, "batch", "ana", HOST, 100.0, coscheduled=False)
    share = ShareSnapshot(now=NOW, running=[work], teams=two_teams())
    result = find_assignments(occupied(fleet, work), [plain("b/x", "bo", 4)], share=share)
    assert [8, 9] == sorted(i for e in result.evictions for i in e.task_indices)  # the newest two are borrowed
    assert 2 == len(result.assignments)


@pytest.mark.parametrize(
    ("late", "borrowed"),
    [(range(6, 10), [8, 9]), (range(8, 10), [8, 9]), (range(0, 4), [2, 3]), (range(0, 2), [0, 1]), (range(3), [1, 2])],
)
def test_the_quota_cut_falls_inside_a_wave_of_tasks_started_together(late: range, borrowed: list[int]) -> None:
    """A's plain job of 10 tasks started in two waves (the `late` ones 50 s after the others) uses 10 of its 8: the
    8 oldest tasks are within the quota, wherever the cut falls, and only the 2 newer ones are reclaimed; inside the
    wave at the cut the highest indices go first, as when all ten started together."""
    fleet = hosts(1, 10)
    tasks = tuple(RunningTask(i, w.worker_id, 150.0 if i in late else 100.0) for i, w in enumerate(fleet))
    work = RunningJob("a/run", "ana", Band.BATCH, HOST, tasks, coscheduled=False)
    share = ShareSnapshot(now=NOW, running=[work], teams=two_teams())
    result = find_assignments(occupied(fleet, work), [plain("b/x", "bo", 4)], share=share)
    assert borrowed == sorted(i for e in result.evictions for i in e.task_indices)
    assert 2 == len(result.assignments)


def test_jobs_started_at_the_same_moment_count_against_the_quota_in_job_id_order() -> None:
    """A's jobs a/one (6 tasks) and a/two (4 tasks) started together use 10 of A's 8: a/one comes first, so the
    cut falls inside a/two, whose two highest tasks are borrowed and the only ones B's job reclaims."""
    fleet = hosts(1, 10)
    two = RunningJob("a/two", "ana", Band.BATCH, HOST,
                     tuple(RunningTask(i, w.worker_id, 100.0) for i, w in enumerate(fleet[:4])), coscheduled=False)
    one = RunningJob("a/one", "ana", Band.BATCH, HOST,
                     tuple(RunningTask(i, w.worker_id, 100.0) for i, w in enumerate(fleet[4:])), coscheduled=False)
    share = ShareSnapshot(now=NOW, running=[two, one], teams=two_teams())  # fmt: skip
    result = find_assignments(occupied(fleet, two, one), [plain("b/x", "bo", 4)], share=share)
    assert [("a/two", (2, 3))] == [(e.job_id, e.task_indices) for e in result.evictions]
    assert 2 == len(result.assignments)


def test_a_reclaim_and_the_borrowers_own_band_preemption_in_one_pass() -> None:
    """A (quota 2) runs a batch gang of 2 and one batch task beyond it; C (quota 0) one task; B (quota 3) needs 2:
    only the borrowed units go to B (A's newest task and C's). A's own interactive task then takes its batch
    gang's place, by the band rule inside a team: a preemption, not a reclaim (found by the property test)."""
    fleet = hosts(1, 4)
    gang_a = running("a/gang", fleet[:2], "batch", "ana", HOST, 100.0)
    task_a = running("a/task", fleet[2:3], "batch", "ana", HOST, 100.0, coscheduled=False)
    task_c = running("c/task", fleet[3:], "batch", "cy", HOST, 100.0, coscheduled=False)
    teams = Teams((Team("a", ("ana",), Resources(2000)), Team("b", ("bo",), Resources(3000)),
                   Team("c", ("cy",), Resources(0))))  # fmt: skip
    share = ShareSnapshot(now=NOW, running=[gang_a, task_a, task_c], teams=teams)
    jobs = [plain("b/x", "bo", 2, Band.BATCH), plain("a/urgent", "ana")]
    result = find_assignments(occupied(fleet, gang_a, task_a, task_c), jobs, share=share)
    reasons = {e.job_id: e.reason for e in result.evictions}
    assert {"a/task", "c/task", "a/gang"} == set(reasons)
    assert "reclaimed by team b" in reasons["a/task"] and "reclaimed by team b" in reasons["c/task"]
    assert "preempted by interactive job a/urgent" == reasons["a/gang"]
    assert {"b/x": 2, "a/urgent": 1} == {j: sum(a.job_id == j for a in result.assignments) for j in ("b/x", "a/urgent")}


def test_a_team_brought_back_within_its_quota_by_a_reclaim_reclaims_in_the_same_pass() -> None:
    """A (quota 1) runs a batch gang of 2, so the gang is borrowed; C (quota 0) runs five tasks, all borrowed.
    A's interactive task comes first in the queue but is beyond A's quota then, and B's gang (within quota)
    reclaims A's gang. A is now within its quota: its task takes its turn in the same pass, before anything
    borrows, and reclaims one of C's tasks instead of waiting while C keeps five borrowed hosts (found by
    the property test)."""
    fleet = [WorkerSnapshot(f"{s}-w{i}", HOST, {"tpu-name": s, "tpu-worker-id": i}, HOST)
             for s, n in (("x", 1), ("y", 1), ("g", 2), ("s0", 3)) for i in range(n)]  # fmt: skip
    gang_a = running("a/gang", ["g-w0", "g-w1"], "batch", "ana", HOST, 100.0)
    tasks_c = [running(f"c/{w.worker_id}", [w], "batch", "cy", HOST, 100.0, coscheduled=False)
               for w in fleet if not w.worker_id.startswith("g")]  # fmt: skip
    teams = Teams((Team("a", ("ana",), Resources(1000)), Team("b", ("bo",), Resources(2000)),
                   Team("c", ("cy",), Resources(0))))  # fmt: skip
    share = ShareSnapshot(now=NOW, running=[gang_a, *tasks_c], teams=teams)
    jobs = [plain("a/urgent", "ana"), gang("b/train", "bo", 2, Band.BATCH)]
    result = find_assignments(occupied(fleet, gang_a, *tasks_c), jobs, share=share)
    reasons = {e.job_id: e.reason for e in result.evictions}
    assert "capacity borrowed by team a reclaimed by team b for job b/train" == reasons.pop("a/gang")
    [(victim, reason)] = reasons.items()  # one of C's borrowed tasks, for A's task
    assert victim.startswith("c/") and "capacity borrowed by team c reclaimed by team a for job a/urgent" == reason
    placed = [a.job_id for a in result.assignments]
    assert {"b/train": 2, "a/urgent": 1} == {j: placed.count(j) for j in ("b/train", "a/urgent")}


def test_inside_a_team_at_its_quota_a_higher_band_takes_its_own_lower_band_work_place() -> None:
    """Every team fills its quota of a full fleet. A's interactive task has no room in A's quota, but inside a
    team bands decide: it evicts one of A's own batch tasks and runs where that one ran. Nothing of another
    team is touched and A's use does not grow (a capacity-only fit: no free room is borrowed beside it)."""
    fleet = hosts(1, 6)
    teams = Teams((Team("a", ("ana",), Resources(2000)), Team("b", ("bo",), Resources(2000)),
                   Team("c", ("cy",), Resources(2000))))  # fmt: skip
    runs = [running(f"{user}/{i}", [w], "batch", user, HOST, 100.0 + i, coscheduled=False)
            for i, (user, w) in enumerate(zip(("ana", "ana", "bo", "bo", "cy", "cy"), fleet, strict=True))]  # fmt: skip
    share = ShareSnapshot(now=NOW, running=runs, teams=teams)
    result = find_assignments(occupied(fleet, *runs), [plain("a/urgent", "ana")], share=share)
    assert [("ana/1", "preempted by interactive job a/urgent")] == [(e.job_id, e.reason) for e in result.evictions]
    assert [("a/urgent", "s0-w1")] == [(a.job_id, a.worker_id) for a in result.assignments]
    # Over its quota (its newer batch task borrowed) and with nothing left to borrow, bands still decide
    # inside the team: the interactive task takes its borrowed batch task's place, and A borrows no more.
    over = Teams((Team("a", ("ana",), Resources(1000)), *teams.teams[1:]))
    result = find_assignments(occupied(fleet, *runs), [plain("a/urgent", "ana")],
                              share=ShareSnapshot(now=NOW, running=runs, teams=over))  # fmt: skip
    assert [("ana/1", "preempted by interactive job a/urgent")] == [(e.job_id, e.reason) for e in result.evictions]
    assert [("a/urgent", "s0-w1")] == [(a.job_id, a.worker_id) for a in result.assignments]


def test_borrowed_work_takes_the_place_of_lower_band_borrowed_work() -> None:
    """A fills its quota and borrows B's idle half with interactive tasks; a user in no team (quota 0) then
    asks for two production tasks. Nothing is left to borrow, but A's borrowed interactive tasks are of a lower
    band: they make way (newest first), as band preemption would, and what is borrowed in all does not grow.
    A's work within its quota is never touched."""
    fleet = hosts(1, 4)
    teams = Teams((Team("a", ("ana",), Resources(2000)), Team("b", ("bo",), Resources(2000))))
    runs = [running(f"ana/{i}", [w], "interactive", "ana", HOST, 100.0 + i, coscheduled=False)
            for i, w in enumerate(fleet)]  # fmt: skip
    share = ShareSnapshot(now=NOW, running=runs, teams=teams)
    result = find_assignments(occupied(fleet, *runs), [plain("dan/prod", "dan", 2, band=Band.PRODUCTION)],
                              share=share)  # fmt: skip
    assert {"ana/2", "ana/3"} == {e.job_id for e in result.evictions}
    assert {"s0-w2", "s0-w3"} == {a.worker_id for a in result.assignments}
    # At the same band nothing gives way: the job waits, saying why.
    level = find_assignments(occupied(fleet, *runs), [plain("dan/more", "dan", 2)], share=share)
    assert () == level.evictions and "no idle quota left to borrow" in level.pending_reasons["dan/more"]


def test_borrowed_work_does_not_take_the_place_of_a_gang_the_quota_edge_runs_through() -> None:
    """A (quota 3 of 5 hosts) runs a one-host task, a one-host gang, then a two-host gang and a one-host task
    (batch, in that order): 5 hosts, 2 borrowed. The quota's edge runs through the two-host gang: one host of it
    is A's own. A user in no team asks for three interactive tasks. Only the last task is borrowed whole: it
    makes way for one task; evicting the gang too would leave A's host of it idle, lent to the newcomer, and what
    is borrowed in all would grow from 2 to 3 (hypothesis found it: test_teams_properties)."""
    fleet = [*hosts(1, 1), *[WorkerSnapshot(f"s{s}-w{i}", HOST, {"tpu-name": f"s{s}", "tpu-worker-id": i}, HOST)
                             for s in (1, 2) for i in range(2)]]  # fmt: skip
    teams = Teams((Team("a", ("ana",), Resources(3000)), Team("b", ("bo",), Resources(1000), None, Resources(0))))
    runs = [running("ana/first", ["s2-w1"], "batch", "ana", HOST, 90.0, coscheduled=False),
            running("ana/g1", ["s0-w0"], "batch", "ana", HOST, 100.0),
            running("ana/g2", ["s1-w0", "s1-w1"], "batch", "ana", HOST, 100.0),
            running("ana/last", ["s2-w0"], "batch", "ana", HOST, 100.0, coscheduled=False)]  # fmt: skip
    share = ShareSnapshot(now=NOW, running=runs, teams=teams)
    result = find_assignments(occupied(fleet, *runs), [plain("dan/x", "dan", 3)], share=share)
    assert ["ana/last"] == [e.job_id for e in result.evictions]
    assert ["s2-w0"] == [a.worker_id for a in result.assignments]

def test_without_teams_a_lower_band_is_not_evicted_for_a_lower_band() -> None:
    """The same cluster without teams: a batch job evicts nobody (bands alone decide)."""
    fleet = hosts()
    old = running("a/old", fleet[:8], "interactive", "ana", HOST, 100.0)
    new = running("a/new", fleet[8:], "interactive", "ana", HOST, 200.0)
    share = ShareSnapshot(now=NOW, running=[old, new])
    result = find_assignments(occupied(fleet, old, new), [gang("b/train", "bo", band=Band.BATCH)], share=share)
    assert () == result.evictions


@pytest.mark.parametrize(
    ("teams", "message"),
    [
        (lambda: Teams((Team("a", ("ana",)), Team("a"))), "'a' is defined twice"),
        (lambda: Teams((Team("a", ("ana",)), Team("b", ("ana",)))), "'ana' is a member of both 'a' and 'b'"),
        (lambda: Team(""), "team name must be a non-empty string"),
        (lambda: Team("a", ("ana", "ana")), "a member is listed twice"),
    ],
)
def test_bad_teams_are_refused_with_a_reason(teams: object, message: str) -> None:
    """Teams validate themselves: a clear error names what is wrong."""
    with pytest.raises(ValueError, match=message):
        teams()  # type: ignore[operator]


def test_the_queue_lists_borrowing_work_in_the_order_it_is_tried() -> None:
    """A user of no team borrows everything. His gang, queued first, is tried before his throttled array, but the
    array's reason (its cap) was written in the quota walk, before the gang's: the queue listed the array first."""
    fleet = hosts(1, 2)
    teams = Teams((Team("a", ("ana",), Resources(1000)),))
    share = ShareSnapshot(now=NOW, teams=teams)
    big = Resources(1500, GIB, 0, 0)  # neither host can take a task of the gang
    jobs = [
        PendingJob("dave/gang", (0, 1), big, group_by="tpu-name", band=Band.BATCH, user="dave"),
        PendingJob("dave/array", tuple(range(40)), HOST, band=Band.BATCH, user="dave", max_concurrent=2),
    ]
    result = find_assignments(fleet, jobs, share=share)
    assert ("dave/gang", "dave/array") == result.queue
