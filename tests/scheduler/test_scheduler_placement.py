"""find_assignments: coscheduling, capacity, taints, queue order, backfill, starvation, timeouts, reasons."""

from __future__ import annotations

import copy
from collections import Counter

from sched_helpers import GIB, gang, job, placed, tpu_slice, worker

from scheduler import (
    Constraint,
    Op,
    PendingJob,
    Resources,
    SchedulingPolicy,
    WorkerSnapshot,
    find_assignments,
)


def test_gang_goes_to_one_group_in_tpu_worker_id_order() -> None:
    """Task i lands on the worker with the i-th smallest numeric tpu-worker-id of one slice."""
    workers = tpu_slice("s0", 4)
    result = find_assignments(workers, [gang("g", 4, "v5e-16")])
    assert {0: "s0-w0", 1: "s0-w1", 2: "s0-w2", 3: "s0-w3"} == placed(result, "g")


def test_tpu_worker_id_order_is_numeric() -> None:
    """tpu-worker-id 10 sorts after 9 (numerically, not as text)."""
    workers = tpu_slice("s0", 12)
    result = find_assignments(workers, [gang("g", 12)])
    assert "s0-w10" == placed(result, "g")[10]


def test_two_gangs_land_on_two_different_slices() -> None:
    """Two whole-slice gangs take two different slices."""
    workers = tpu_slice("s0", 4) + tpu_slice("s1", 4)
    result = find_assignments(workers, [gang("a", 4, "v5e-16"), gang("b", 4, "v5e-16")])
    slices = {name: {w.split("-")[0] for w in placed(result, name).values()} for name in ("a", "b")}
    assert {"a": {"s0"}, "b": {"s1"}} == slices


def test_gang_is_all_or_nothing_and_waits_with_reason() -> None:
    """A gang that no group can hold places nothing and says how close the best group came."""
    workers = tpu_slice("s0", 4)
    busy = WorkerSnapshot("s0-w3", Resources(16000, 32 * GIB, 0, 0), dict(workers[0].attributes))
    workers = [busy, *workers[1:]]
    result = find_assignments(workers, [gang("g", 4, "v5e-16")])
    assert {} == placed(result, "g")
    assert (
        "no tpu-name group has 4 free workers: best has 3 (1 have < 4 free tpus)"
        == result.pending_reasons["g"]
    )


def test_gang_without_enough_matching_workers_explains_constraints() -> None:
    """When no group even has enough matching workers, the reason counts the constraint rejections."""
    workers = [*tpu_slice("s0", 2, topology="v4-16"), worker("cpu0")]
    result = find_assignments(workers, [gang("g", 4, "v5e-16")])
    expected = "no tpu-name group has 4 matching workers: best has 0 (3 lack tpu-topology=v5e-16)"
    assert expected == result.pending_reasons["g"]


def test_gang_best_fit_prefers_the_smallest_group_that_fits() -> None:
    """A 2-host gang takes the 2-host slice, keeping the 8-host slice whole for the 8-host gang."""
    workers = tpu_slice("big", 8) + tpu_slice("small", 2)
    result = find_assignments(workers, [gang("two", 2), gang("eight", 8)])
    assert {"small"} == {w.split("-")[0] for w in placed(result, "two").values()}
    assert 8 == len(placed(result, "eight"))


def test_plain_tasks_avoid_whole_groups() -> None:
    """Plain tasks prefer workers outside TPU groups, so slices stay whole for gangs."""
    workers = [*tpu_slice("s0", 4), worker("cpu0", cpu=4)]
    result = find_assignments(workers, [job("p", 4, cpu=1), gang("g", 4)])
    assert {"cpu0"} == set(placed(result, "p").values())
    assert 4 == len(placed(result, "g"))


def test_plain_tasks_fill_partially_used_groups_before_whole_ones() -> None:
    """Once on group workers, plain tasks go to a group already in use before an untouched one."""
    used = [
        WorkerSnapshot(w.worker_id, w.free, w.attributes, capacity=Resources(32000, 64 * GIB, 0, 4))
        for w in tpu_slice("used", 2)
    ]
    workers = tpu_slice("fresh", 2) + used
    result = find_assignments(workers, [job("p", 1, cpu=1)])
    assert {"used"} == {w.split("-")[0] for w in placed(result, "p").values()}


def test_capacity_is_never_exceeded_and_tasks_stack() -> None:
    """Many tasks stack on a worker up to its capacity in every resource, and no further."""
    workers = [worker("a", cpu=4, memory_gib=64), worker("b", cpu=64, memory_gib=3)]
    result = find_assignments(workers, [job("p", 20, cpu=1, memory_gib=1)])
    assert {"a": 4, "b": 3} == dict(Counter(a.worker_id for a in result.assignments))
    assert (
        "placed 7 of 20 tasks; 0/2 workers: 1 have < 1 free cpu, 1 have < 1GiB free memory"
        == (result.pending_reasons["p"])
    )


def test_pending_reason_counts_each_filter() -> None:
    """The reason charges each worker to the first filter that rejects it, cpu in cores."""
    workers = [worker(f"t{i}", tpu_topology="v4-16") for i in range(4)] + [
        worker("x", cpu=8),
        worker("y", cpu=8),
    ]
    jobs = [job("p", 1, cpu=64, constraints=(Constraint("tpu-topology", Op.EQ, "v4-16"),))]
    workers += [worker("z", tpu_topology="v5e-16")]
    result = find_assignments(workers, jobs)
    assert "0/7 workers: 3 lack tpu-topology=v4-16, 4 have < 64 free cpu" == result.pending_reasons["p"]


def test_taint_repels_unless_tolerated_or_mentioned() -> None:
    """A tainted worker takes only jobs that tolerate the taint or constrain its key explicitly."""
    workers = [worker("t", **{"taint:maintenance": True})]
    plain = find_assignments(workers, [job("p")])
    assert ({}, "0/1 workers: 1 tainted maintenance") == (placed(plain, "p"), plain.pending_reasons["p"])
    tolerated = find_assignments(workers, [job("p", tolerations=frozenset({"maintenance"}))])
    assert {0: "t"} == placed(tolerated, "p")
    mentioned = find_assignments(
        workers, [job("p", constraints=(Constraint("taint:maintenance", Op.EQ, True),))]
    )
    assert {0: "t"} == placed(mentioned, "p")


def test_scheduling_timeout_reports_tasks_instead_of_placing() -> None:
    """A job waiting past its scheduling timeout is reported timed out and not placed."""
    jobs = [
        job("late", 2, waited_seconds=11.0, scheduling_timeout_seconds=10.0),
        job("ok", waited_seconds=5.0, scheduling_timeout_seconds=10.0),
    ]
    result = find_assignments([worker("a")], jobs)
    assert (("late", 0), ("late", 1)) == result.timed_out
    assert {0: "a"} == placed(result, "ok")
    assert "late" not in result.pending_reasons


def test_queue_order_earlier_job_wins() -> None:
    """When capacity is short, the earlier job in the queue gets it."""
    result = find_assignments([worker("a", cpu=2)], [job("first", 2), job("second", 2)])
    assert (2, 0) == (len(placed(result, "first")), len(placed(result, "second")))


def test_higher_priority_band_goes_first() -> None:
    """A higher priority band is served before earlier jobs of a lower band."""
    result = find_assignments([worker("a", cpu=2)], [job("low", 2), job("high", 2, priority=5)])
    assert (0, 2) == (len(placed(result, "low")), len(placed(result, "high")))


def test_backfill_stuck_job_does_not_block_later_jobs() -> None:
    """A job that fits nowhere reserves nothing: smaller jobs behind it still run."""
    workers = tpu_slice("s0", 2)
    result = find_assignments(workers, [gang("big", 4), job("small", 1)])
    assert ({}, 1) == (placed(result, "big"), len(placed(result, "small")))


def test_starving_gang_reserves_its_best_group() -> None:
    """A gang waiting past the starvation threshold holds the group closest to fitting against later jobs."""
    slice0 = tpu_slice("s0", 2)
    busy = WorkerSnapshot(slice0[0].worker_id, Resources(16000, 32 * GIB, 0, 0), slice0[0].attributes)
    workers = [busy, slice0[1]]
    policy = SchedulingPolicy(starvation_seconds=60)
    young = find_assignments(
        workers, [gang("big", 2, waited_seconds=10), job("small", 1, tpus=4)], policy=policy
    )
    assert 1 == len(placed(young, "small"))
    old = find_assignments(
        workers, [gang("big", 2, waited_seconds=600), job("small", 1, tpus=4)], policy=policy
    )
    assert {} == placed(old, "small")
    assert old.pending_reasons["big"].endswith("holding tpu-name=s0 for it (waited 600s)")
    assert "0/2 workers: 2 held for a starving job" == old.pending_reasons["small"]


def test_starving_plain_job_reserves_workers() -> None:
    """A starving plain job holds one matching worker per unplaced task, so small jobs cannot take it."""
    workers = [worker("a", cpu=4), worker("b", cpu=2)]
    policy = SchedulingPolicy(starvation_seconds=60)
    result = find_assignments(
        workers, [job("big", 1, cpu=8, waited_seconds=100), job("small", 1)], policy=policy
    )
    assert {0: "b"} == placed(result, "small")


def test_inputs_are_not_mutated() -> None:
    """find_assignments is pure: workers and jobs are unchanged after a pass."""
    workers = [*tpu_slice("s0", 4), worker("c", cpu=2)]
    jobs = [gang("g", 4), job("p", 3)]
    before = copy.deepcopy((workers, jobs))
    find_assignments(workers, jobs)
    assert before == (workers, jobs)


def test_identical_plain_jobs_share_work_and_fill_in_order() -> None:
    """Many identical jobs are placed in FIFO order until capacity runs out, then all get the same reason."""
    workers = [worker(f"w{i}", cpu=4) for i in range(3)]
    jobs = [PendingJob(f"j{i}", (0, 1), Resources(1000, GIB)) for i in range(10)]
    result = find_assignments(workers, jobs)
    assert [f"j{i}" for i in range(6)] == sorted(
        {a.job_id for a in result.assignments}, key=lambda s: int(s[1:])
    )
    assert {"0/3 workers: 3 have < 1 free cpu"} == {result.pending_reasons[f"j{i}"] for i in range(6, 10)}


def test_gangs_see_only_the_hosts_of_a_slice_their_constraints_allow() -> None:
    """A slice whose hosts differ in an attribute (two zones) hosts a gang constrained to one zone only on that
    zone's hosts, while a gang of the same request constrained otherwise, or not at all, sees the others."""
    hosts = [
        worker(f"s0-w{i}", cpu=16, tpus=4, tpu_name="s0", tpu_worker_id=i, zone="a" if i < 2 else "b")
        for i in range(4)
    ]
    in_a = (Constraint("zone", Op.EQ, "a"),)
    in_any = (Constraint("zone", Op.IN, ["a", "b"]),)
    too_big = find_assignments(hosts, [job("a3", 3, cpu=8, tpus=4, constraints=in_a, group_by="tpu-name")])
    assert not too_big.assignments
    assert "a3" in too_big.pending_reasons
    result = find_assignments(
        hosts,
        [
            job("a2", 2, cpu=8, tpus=4, constraints=in_a, group_by="tpu-name"),
            job("any2", 2, cpu=8, tpus=4, constraints=in_any, group_by="tpu-name"),
        ],
    )
    assert placed(result, "a2") == {0: "s0-w0", 1: "s0-w1"}
    assert placed(result, "any2") == {0: "s0-w2", 1: "s0-w3"}
    # The same slice, nothing constrained: the gang of four takes it whole; a zone-a gang then finds it full.
    whole = find_assignments(
        hosts,
        [job("all4", 4, cpu=8, tpus=4, group_by="tpu-name"), job("a1", 1, cpu=8, tpus=4, constraints=in_a,
                                                                      group_by="tpu-name")],
    )  # fmt: skip
    assert sorted(placed(whole, "all4").values()) == [f"s0-w{i}" for i in range(4)]
    assert placed(whole, "a1") == {}
