"""Preemption in one pass: who may evict whom, whole gangs, cheapest victims, free and autoscaler capacity first."""

from __future__ import annotations

from sched_helpers import GIB, gang, job, occupied, placed, running, tpu_slice, worker

from scheduler import Band, Eviction, GroupHeadroom, Resources, ShareSnapshot, UserAccount, find_assignments

NOW = 10_000.0
CPU_TASK = Resources(4000, GIB)


def share(*jobs: object, **options: object) -> ShareSnapshot:
    """A share snapshot at NOW with the given running jobs; every user has credits."""
    return ShareSnapshot(now=NOW, default_credits=100.0, running=jobs, **options)  # type: ignore[arg-type]


def test_an_interactive_gang_evicts_a_whole_batch_gang_and_takes_its_slice() -> None:
    """Every task of the batch gang is evicted, the interactive gang is placed there, the reason says so."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep-3", hosts)
    result = find_assignments(occupied(hosts, sweep), [gang("bob/train", 4, user="bob")], share=share(sweep))
    expected = Eviction("ana/sweep-3", (0, 1, 2, 3), Band.BATCH, "bob/train", "preempted by interactive job bob/train")
    assert (expected,) == result.evictions
    assert {0: "s0-w0", 1: "s0-w1", 2: "s0-w2", 3: "s0-w3"} == placed(result, "bob/train")
    assert "evicting 4 batch tasks of ana/sweep-3" == result.pending_reasons["bob/train"]


def test_a_plain_task_evicts_a_gang_whole_never_half() -> None:
    """One interactive task needs one host's chips; the batch gang holding it goes whole, all four tasks."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    want = job("bob/one", cpu=8, tpus=4, user="bob")
    result = find_assignments(occupied(hosts, sweep), [want], share=share(sweep))
    assert [(0, 1, 2, 3)] == [e.task_indices for e in result.evictions]
    assert 1 == len(placed(result, "bob/one"))


def test_free_capacity_is_used_before_anything_is_evicted() -> None:
    """With a second, idle slice the interactive gang goes there and the batch gang keeps running."""
    busy, idle = tpu_slice("s0", 4), tpu_slice("s1", 4)
    sweep = running("ana/sweep", busy)
    result = find_assignments(occupied(busy, sweep) + idle, [gang("bob/train", 4)], share=share(sweep))
    assert () == result.evictions
    assert {"s1"} == {w.split("-")[0] for w in placed(result, "bob/train").values()}


def test_autoscaler_headroom_is_preferred_to_eviction() -> None:
    """A group that can still add a slice hosts the gang: nothing is evicted and the reason says it waits."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    room = GroupHeadroom("v5e", tuple(tpu_slice("new", 4)), slices=1)
    result = find_assignments(
        occupied(hosts, sweep), [gang("bob/train", 4)], share=share(sweep, headroom=[room])
    )
    assert () == result.evictions
    assert {} == placed(result, "bob/train")
    assert result.pending_reasons["bob/train"].startswith(
        "waiting for a new v5e slice from the autoscaler (nothing evicted); no tpu-name group has 4 free workers"
    )


def test_a_group_at_max_slices_does_not_stop_eviction() -> None:
    """Headroom of zero slices serves nothing, so the gang evicts."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    room = GroupHeadroom("v5e", tuple(tpu_slice("new", 4)), slices=0)
    result = find_assignments(occupied(hosts, sweep), [gang("bob/train", 4)], share=share(sweep, headroom=[room]))
    assert ["ana/sweep"] == [e.job_id for e in result.evictions]


def test_headroom_is_claimed_so_a_second_gang_evicts() -> None:
    """One slice of headroom serves the first gang; the second, finding none left, evicts."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    room = GroupHeadroom("v5e", tuple(tpu_slice("new", 4)), slices=1)
    jobs = [gang("bob/a", 4), gang("bob/b", 4)]
    result = find_assignments(occupied(hosts, sweep), jobs, share=share(sweep, headroom=[room]))
    assert [("ana/sweep", "bob/b")] == [(e.job_id, e.preemptor) for e in result.evictions]


def test_the_same_band_is_never_evicted() -> None:
    """An interactive gang waits behind a running interactive gang."""
    hosts = tpu_slice("s0", 4)
    other = running("ana/train", hosts, band="interactive")
    result = find_assignments(occupied(hosts, other), [gang("bob/train", 4)], share=share(other))
    assert () == result.evictions
    assert "no tpu-name group has 4 free workers" in result.pending_reasons["bob/train"]


def test_production_is_never_evicted() -> None:
    """Not even by production: a production gang waits behind a running production gang."""
    hosts = tpu_slice("s0", 4)
    prod = running("ana/prod", hosts, band="production")
    jobs = [gang("bob/p", 4, band=Band.PRODUCTION), gang("bob/i", 4)]
    result = find_assignments(occupied(hosts, prod), jobs, share=share(prod))
    assert () == result.evictions


def test_nothing_is_evicted_for_a_job_that_would_still_not_fit() -> None:
    """An 8-host gang cannot fit on a 4-host slice even if its batch gang went: nothing is evicted."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    result = find_assignments(occupied(hosts, sweep), [gang("bob/big", 8)], share=share(sweep))
    assert () == result.evictions
    assert {} == placed(result, "bob/big")


def test_a_user_without_credits_cannot_evict() -> None:
    """bob asked for interactive but has no credits, so he is batch and may not evict ana's batch gang."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    users = {"bob": UserAccount("bob", 0.0)}
    result = find_assignments(
        occupied(hosts, sweep), [gang("bob/train", 4, user="bob")], share=share(sweep, users=users)
    )
    assert () == result.evictions


def test_a_demoted_users_running_work_is_a_victim() -> None:
    """ana (no credits) runs as batch; bob's interactive gang evicts her."""
    hosts = tpu_slice("s0", 4)
    users = {"ana": UserAccount("ana", 0.0)}
    first = find_assignments(hosts, [gang("ana/train", 4, user="ana")], share=share(users=users))
    band = first.effective_bands["ana/train"]
    ana = running("ana/train", hosts, band=band)
    result = find_assignments(occupied(hosts, ana), [gang("bob/train", 4, user="bob")], share=share(ana, users=users))
    assert ["ana/train"] == [e.job_id for e in result.evictions]


def test_the_lowest_band_is_evicted_first() -> None:
    """Production may evict interactive or batch; it evicts the batch gang."""
    s0, s1 = tpu_slice("s0", 4), tpu_slice("s1", 4)
    inter, batch = running("x/inter", s0, band="interactive"), running("y/batch", s1)
    jobs = [gang("p", 4, band=Band.PRODUCTION)]
    result = find_assignments(occupied(s0 + s1, inter, batch), jobs, share=share(inter, batch))
    assert ["y/batch"] == [e.job_id for e in result.evictions]


def test_the_victim_that_loses_least_work_goes_first() -> None:
    """Of two batch gangs the one that started a minute ago is evicted, not the one that ran for hours."""
    s0, s1 = tpu_slice("s0", 4), tpu_slice("s1", 4)
    old = running("x/old", s0, started_at=NOW - 5 * 3600)
    new = running("y/new", s1, started_at=NOW - 60)
    result = find_assignments(occupied(s0 + s1, old, new), [gang("p", 4)], share=share(old, new))
    assert ["y/new"] == [e.job_id for e in result.evictions]


def test_fewest_tasks_break_a_tie_in_lost_work() -> None:
    """Two workers: one runs one 4-core batch task, the other two 2-core ones, all just started: evict one."""
    one, two = worker("one", cpu=4), worker("two", cpu=4)
    big = running("x/big", [one], request=CPU_TASK, started_at=NOW, coscheduled=False)
    small = running("y/small", [two, two], request=Resources(2000, GIB // 2), started_at=NOW, coscheduled=False)
    result = find_assignments(occupied([one, two], big, small), [job("p", cpu=4)], share=share(big, small))
    assert [("x/big", (0,))] == [(e.job_id, e.task_indices) for e in result.evictions]
    assert {0: "one"} == placed(result, "p")


def test_the_worker_whose_victims_lose_least_in_all_is_chosen() -> None:
    """Worker "pair" runs two 2-core tasks for 60 s, "single" one 4-core task for 45 s: making room on "pair"
    loses 120 core-seconds of work (though either of its tasks alone loses less than "single"'s), on "single"
    90: the single task is evicted."""
    pair, single = worker("pair", cpu=4), worker("single", cpu=4)
    two = running("x/two", [pair, pair], request=Resources(2000, GIB // 2), started_at=NOW - 60, coscheduled=False)
    one = running("y/one", [single], request=CPU_TASK, started_at=NOW - 45, coscheduled=False)
    result = find_assignments(occupied([pair, single], two, one), [job("p", cpu=4)], share=share(two, one))
    assert [("y/one", (0,))] == [(e.job_id, e.task_indices) for e in result.evictions]
    assert {0: "single"} == placed(result, "p")


def test_only_the_plain_tasks_needed_are_evicted() -> None:
    """Two interactive 4-core tasks evict two of the four batch tasks of a sweep, and say so."""
    hosts = [worker(f"w{i}", cpu=4) for i in range(4)]
    sweep = running("ana/sweep", hosts, request=CPU_TASK, started_at=NOW, coscheduled=False)
    result = find_assignments(occupied(hosts, sweep), [job("bob/two", tasks=2, cpu=4)], share=share(sweep))
    assert 1 == len(result.evictions)
    assert 2 == len(result.evictions[0].task_indices)
    assert 2 == len(placed(result, "bob/two"))
    assert "evicting 2 batch tasks of ana/sweep" == result.pending_reasons["bob/two"]


def test_capacity_a_victim_frees_is_not_given_to_later_jobs_in_the_same_pass() -> None:
    """A batch job behind the preemptor cannot use the evicted gang's spare hosts until they really stop."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    jobs = [job("bob/one", cpu=8, tpus=4), job("carl/batch", cpu=8, tpus=4, band=Band.BATCH)]
    result = find_assignments(occupied(hosts, sweep), jobs, share=share(sweep))
    assert 1 == len(placed(result, "bob/one"))
    assert {} == placed(result, "carl/batch")


def test_no_running_work_means_no_evictions() -> None:
    """A share snapshot without running jobs behaves like a pass without preemption."""
    result = find_assignments(tpu_slice("s0", 2), [gang("g", 4)], share=share())
    assert () == result.evictions


def test_headroom_from_the_autoscaler_counts_booting_slices_and_room_below_max() -> None:
    """A group with one READY and one CREATING slice of max 3 can bring 2; while it backs off, only the booting one."""
    from scheduler.autoscale import GroupShape, SliceView, headroom

    group = GroupShape("v5e", 4, Resources(16000, 32 * GIB, 0, 4), {"tpu-topology": "v5e-16"}, max_slices=3)
    slices = [SliceView("a", "v5e", "READY"), SliceView("b", "v5e", "CREATING")]
    (room,) = headroom([group], slices, now=0.0)
    assert ("v5e", 2, 4) == (room.group, room.slices, len(room.hosts))
    assert "v5e-16" == room.hosts[0].attributes["tpu-topology"]
    backing_off = GroupShape(**{**group.__dict__, "backoff_until": 100.0})
    assert 1 == headroom([backing_off], slices, now=0.0)[0].slices


def test_headroom_counts_how_many_plain_tasks_a_new_slice_holds() -> None:
    """A new slice holds 16 one-chip tasks: a 2-task job claims one slice, a 30-task job two; nothing is evicted."""
    hosts = tpu_slice("s0", 4)
    sweep = running("ana/sweep", hosts)
    room = GroupHeadroom("v5e", tuple(tpu_slice("new", 4)), slices=3)
    jobs = [job("bob/two", tasks=2, cpu=1, tpus=1), job("bob/thirty", tasks=30, cpu=1, tpus=1)]
    result = find_assignments(occupied(hosts, sweep), jobs, share=share(sweep, headroom=[room]))
    assert () == result.evictions
    assert all(result.pending_reasons[j].startswith("waiting for a new v5e slice") for j in ("bob/two", "bob/thirty"))
