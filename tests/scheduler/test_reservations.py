"""Reservations in the pure scheduler: held whole, set aside for their tree, trees kept inside, reasons."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Constraint, Op, PendingJob, Resources, WorkerSnapshot, find_assignments
from scheduler.reservations import Reservation, demand_view, governing
from tests.scheduler.sched_helpers import GIB, job, worker

WHOLE = Resources(4000, 4 * GIB)


def fleet(n: int = 4) -> list[WorkerSnapshot]:
    return [worker(f"w{i}", cpu=4, memory_gib=4) for i in range(n)]


def reservation(job_id: str = "p", entries: int = 2, **options: object) -> Reservation:
    return Reservation(f"rsv-{job_id}", job_id, (WHOLE,) * entries, **options)  # type: ignore[arg-type]


def on(result: object, job_id: str) -> list[str]:
    return sorted(a.worker_id for a in result.assignments if a.job_id == job_id)  # type: ignore[attr-defined]


def test_waiting_reservation_is_held_whole_before_the_queue() -> None:
    """A reservation of two whole workers takes two workers; the queue fills only the rest."""
    result = find_assignments(fleet(), [job("other", 4, cpu=4)], reservations=[reservation()])
    held = dict(result.reservation_holds["rsv-p"])
    assert [0, 1] == sorted(held)
    assert 2 == len(set(held.values()))
    assert set(on(result, "other")).isdisjoint(held.values())
    assert 2 == len(on(result, "other"))
    assert "0/4 workers: 2 have < 4 free cpu, 2 held by reservations" in result.pending_reasons["other"]


def test_reservation_that_cannot_be_held_holds_nothing_and_says_why() -> None:
    """All or nothing: three whole workers wanted on a fleet with two free, so none is held."""
    workers = [*fleet(2), worker("busy", cpu=0, memory_gib=0)]
    result = find_assignments(workers, [job("other", 1)], reservations=[reservation(entries=3)])
    assert {} == dict(result.reservation_holds)
    assert "entry" in result.reservation_reasons["rsv-p"]
    assert "have < 4 free cpu" in result.reservation_reasons["rsv-p"]
    assert 1 == len(on(result, "other"))


def test_tree_jobs_stay_inside_and_wait_naming_the_reservation() -> None:
    """Five one-worker children of a 2-worker reservation: two run, on its workers; three wait."""
    held = reservation(held={0: "w0", 1: "w1"})
    children = [job(f"p/c{i}", 1, cpu=4, memory_gib=4) for i in range(5)]
    result = find_assignments(fleet(), [*children, job("other", 2, cpu=4)], reservations=[held])
    inside = [w for i in range(5) for w in on(result, f"p/c{i}")]
    assert ["w0", "w1"] == sorted(inside)
    assert ["w2", "w3"] == on(result, "other")
    for i in range(2, 5):
        assert "inside reservation rsv-p (2 workers): 2 have < 4 cpu left in it" == result.pending_reasons[f"p/c{i}"]


def test_released_reservation_is_placeable_in_the_same_pass() -> None:
    """The pass that no longer lists a reservation gives its workers to the queue at once."""
    held = reservation(held={0: "w0", 1: "w1"})
    queue = [job("other", 4, cpu=4, memory_gib=4)]
    before = find_assignments(fleet(), queue, reservations=[held])
    assert ["w2", "w3"] == on(before, "other")
    after = find_assignments(fleet(), queue, reservations=[])
    assert ["w0", "w1", "w2", "w3"] == on(after, "other")


def test_reserving_jobs_own_tasks_are_placed_outside() -> None:
    """The reserving job is not in its own tree: its tasks use the free pool, not the reservation."""
    held = reservation(held={0: "w0", 1: "w1"})
    result = find_assignments(fleet(), [job("p", 1, cpu=4, memory_gib=4)], reservations=[held])
    assert on(result, "p")[0] in {"w2", "w3"}


def test_a_reservation_leaving_its_own_job_no_room_is_not_held() -> None:
    """Reserving the whole fleet left the reserving job's own task nowhere to run, and the fleet held for a job
    that could never start (without a scheduling timeout, forever): it is not held, says why, and the job's own
    task is placed; with room for both, both."""
    result = find_assignments(fleet(2), [job("p", 1, cpu=0.25)], reservations=[reservation()])
    assert {} == dict(result.reservation_holds)
    assert "no room for the tasks of p itself" in result.reservation_reasons["rsv-p"]
    assert 1 == len(on(result, "p"))
    both = find_assignments(fleet(3), [job("p", 1, cpu=0.25)], reservations=[reservation()])
    held = dict(both.reservation_holds["rsv-p"])
    assert 2 == len(held) and on(both, "p")[0] not in held.values()


def test_used_capacity_is_not_given_twice() -> None:
    """What the tree's running tasks use counts against the reservation, not twice against the worker."""
    w0 = WorkerSnapshot("w0", Resources(2000, 2 * GIB))  # 4 cpu worker, 2 used by the tree
    held = reservation(entries=1, held={0: "w0"}, used={"w0": Resources(2000, 2 * GIB)})
    result = find_assignments([w0], [job("p/c", 2, cpu=1), job("other", 1, cpu=1)], reservations=[held])
    assert ["w0", "w0"] == on(result, "p/c")
    assert [] == on(result, "other")
    assert "other" in result.pending_reasons


def test_child_too_big_for_any_entry_is_told_so() -> None:
    """A child bigger than anything the reservation holds waits with a reason saying it never fits."""
    held = reservation(held={0: "w0", 1: "w1"})
    result = find_assignments(fleet(), [job("p/big", 1, cpu=8)], reservations=[held])
    assert "more than the reservation holds on any worker" in result.pending_reasons["p/big"]


def test_children_wait_for_a_reservation_not_held_yet() -> None:
    """While its reservation waits, a tree's job waits too, with the reservation's reason."""
    result = find_assignments([worker("w0", cpu=1)], [job("p/c", 1)], reservations=[reservation()])
    assert result.pending_reasons["p/c"].startswith("waiting for reservation rsv-p to be held")


def test_lost_worker_is_replaced_when_capacity_allows() -> None:
    """An entry whose worker is gone (not held) is held again on its own, without the whole."""
    held = reservation(held={0: "w0"})  # entry 1 lost its worker
    result = find_assignments(fleet(), [], reservations=[held])
    assert [1] == [index for index, _ in result.reservation_holds["rsv-p"]]
    assert "w0" != result.reservation_holds["rsv-p"][0][1]


def test_reservations_do_not_nest() -> None:
    """A reservation asked by a job inside another's tree waits and says so."""
    outer = reservation(held={0: "w0", 1: "w1"})
    inner = Reservation("rsv-p/c", "p/c", (WHOLE,))
    result = find_assignments(fleet(), [], reservations=[outer, inner])
    assert "do not nest" in result.reservation_reasons["rsv-p/c"]


def test_reservation_constraints_and_taints_pick_its_workers() -> None:
    """Reservation constraints choose its workers, and a tainted worker needs a toleration."""
    workers = [worker("a", cpu=4, memory_gib=4, zone="a"), worker("b", cpu=4, memory_gib=4, zone="b"),
               WorkerSnapshot("t", WHOLE, {"zone": "b", "taint:x": True})]  # fmt: skip
    wanted = reservation(entries=2, constraints=(Constraint("zone", Op.EQ, "b"),))
    result = find_assignments(workers, [], reservations=[wanted])
    assert "room for 1 of 2 entries" in result.reservation_reasons["rsv-p"]
    assert "1 lack zone=b, 1 tainted x" in result.reservation_reasons["rsv-p"]
    tolerant = reservation(entries=2, constraints=(Constraint("zone", Op.EQ, "b"),), tolerations=frozenset({"x"}))
    result = find_assignments(workers, [], reservations=[tolerant])
    assert ["b", "t"] == sorted(w for _, w in result.reservation_holds["rsv-p"])


def test_gang_child_takes_distinct_reserved_workers_of_one_group() -> None:
    """A coscheduled child is placed whole on reserved workers sharing its group_by value."""
    workers = [worker(f"s{i}", cpu=4, memory_gib=4, tpu_name="s", tpu_worker_id=i) for i in range(2)]
    workers.append(worker("x", cpu=4, memory_gib=4))
    held = reservation(held={0: "s0", 1: "s1"})
    result = find_assignments(workers, [job("p/g", 2, cpu=2, group_by="tpu-name")], reservations=[held])
    assert ["s0", "s1"] == on(result, "p/g")


def test_governing_is_the_innermost_tree() -> None:
    """Ids read as paths: a job belongs to the tree of the nearest reserving ancestor."""
    table = {"a": reservation("a"), "a/b": reservation("a/b")}
    assert "a/b" == governing("a/b/c", table).job_id  # type: ignore[union-attr]
    assert "a" == governing("a/x", table).job_id  # type: ignore[union-attr]
    assert governing("a", table) is None
    assert governing("ab/c", table) is None


def test_autoscaler_sees_reserved_workers_busy_and_missing_entries_as_demand() -> None:
    """Reserved-but-unused capacity is not idle, a tree asks nothing of new capacity, missing entries are demand."""
    held = reservation(held={0: "w0"})  # entry 1 waits for a worker
    workers, jobs = demand_view(fleet(2), [job("p/c", 3), job("other", 1)], [held])
    assert Resources() == workers[0].free and WHOLE == workers[1].free
    assert [("other", (0,)), ("rsv-p", (0,))] == [(j.job_id, j.task_indices) for j in jobs]
    assert WHOLE == jobs[1].request


# -- properties ---------------------------------------------------------------------------------


@st.composite
def scenes(draw: st.DrawFn) -> tuple[list[WorkerSnapshot], list[PendingJob], list[Reservation], dict[str, Resources]]:
    """A small fleet, reservations (some held, with some use by their trees) and a queue mixing trees and others.

    Returns also the capacity of each worker (free + what trees use there), for the checks.
    """
    n = draw(st.integers(1, 6))
    capacity = {f"w{i}": Resources(draw(st.integers(0, 4)) * 1000, draw(st.integers(0, 4))) for i in range(n)}
    left = dict(capacity)
    reservations = []
    used_by_tree: dict[str, Resources] = {}
    for r in range(draw(st.integers(0, 3))):
        entries = tuple(
            Resources(draw(st.integers(0, 2)) * 1000, draw(st.integers(0, 2))) for _ in range(draw(st.integers(1, 3)))
        )
        held: dict[int, str] = {}
        used: dict[str, Resources] = {}
        if draw(st.booleans()):
            for index, entry in enumerate(entries):
                if draw(st.integers(0, 4)) == 0:
                    continue  # lost: waits for a replacement
                fitting = [w for w, free in left.items() if entry.fits_in(free)]
                if fitting:
                    worker_id = draw(st.sampled_from(fitting))
                    held[index] = worker_id
                    left[worker_id] = left[worker_id] - entry
            for worker_id in set(held.values()):
                total = Resources()
                for index, w in held.items():
                    if w == worker_id:
                        total = total + entries[index]
                share = Resources(draw(st.integers(0, total.cpu_millis)), draw(st.integers(0, total.memory_bytes)))
                used[worker_id] = share
                used_by_tree[worker_id] = used_by_tree.get(worker_id, Resources()) + share
        reservations.append(
            Reservation(f"rsv-r{r}", f"r{r}", entries, held=held, used=used, waited_seconds=float(10 - r))
        )
    # The snapshot's free capacity: the workers' capacity less the trees' running tasks and what
    # other work runs there (drawn on what the reservations left).
    workers = []
    for worker_id, cap in capacity.items():
        room = left[worker_id]
        other = Resources(draw(st.integers(0, room.cpu_millis)), draw(st.integers(0, room.memory_bytes)))
        group = draw(st.sampled_from([None, "s0", "s1"]))
        attrs = {} if group is None else {"tpu-name": group}
        workers.append(WorkerSnapshot(worker_id, cap - used_by_tree.get(worker_id, Resources()) - other, attrs))
        capacity[worker_id] = cap - other  # what tree use, holds and new placements share
    jobs = []
    for j in range(draw(st.integers(0, 8))):
        parent = draw(st.sampled_from([None, *(r.job_id for r in reservations)]))
        job_id = f"{parent}/c{j}" if parent else f"j{j}"
        request = Resources(draw(st.integers(0, 2)) * 1000, draw(st.integers(0, 2)))
        group_by = draw(st.sampled_from([None, None, "tpu-name"]))
        jobs.append(PendingJob(job_id, tuple(range(draw(st.integers(1, 3)))), request, group_by=group_by))
    return workers, jobs, reservations, capacity


def _check_plan(scene: tuple[list[WorkerSnapshot], list[PendingJob], list[Reservation], dict[str, Resources]]) -> None:
    workers, jobs, reservations, capacity = scene
    result = find_assignments(workers, jobs, reservations=reservations)
    by_job = {j.job_id: j for j in jobs}
    by_root = {r.job_id: r for r in reservations}
    holding: dict[str, dict[str, Resources]] = {}  # reservation job -> worker -> held after the pass
    for r in reservations:
        held = dict(r.held)
        for index, worker_id in result.reservation_holds.get(r.reservation_id, ()):
            assert index not in r.held, "an entry held twice"
            held[index] = worker_id
        if not r.held and r.reservation_id in result.reservation_holds:
            assert len(held) == len(r.entries), "a reservation is first held whole"
        per: dict[str, Resources] = {}
        for index, worker_id in held.items():
            per[worker_id] = per.get(worker_id, Resources()) + r.entries[index]
        holding[r.job_id] = per
    outside: dict[str, Resources] = {}
    tree_use: dict[tuple[str, str], Resources] = {}
    for a in result.assignments:
        request = by_job[a.job_id].request
        owner = governing(a.job_id, by_root)
        if owner is None:
            outside[a.worker_id] = outside.get(a.worker_id, Resources()) + request
        else:
            assert a.worker_id in holding[owner.job_id], "a tree's task outside its reservation"
            key = (owner.job_id, a.worker_id)
            tree_use[key] = tree_use.get(key, Resources()) + request
    for worker_id, cap in capacity.items():
        # Never double-booked: each reservation takes the larger of what it holds and what its tree
        # uses there (never more than it holds, checked below); outside work takes the rest.
        total = outside.get(worker_id, Resources())
        for r in reservations:
            held = holding[r.job_id].get(worker_id, Resources())
            use = r.used.get(worker_id, Resources()) + tree_use.get((r.job_id, worker_id), Resources())
            # A tree never exceeds its reservation, per worker: what it runs there fits in what it holds.
            if (r.job_id, worker_id) in tree_use:
                assert use.fits_in(held)
            total = total + Resources(
                max(held.cpu_millis, use.cpu_millis), max(held.memory_bytes, use.memory_bytes)
            )
        assert total.fits_in(cap), f"{worker_id} double-booked: {total} > {cap}"
    by_worker = {w.worker_id: w for w in workers}
    for j in jobs:
        tasks = [a for a in result.assignments if a.job_id == j.job_id]
        if len(tasks) < len(j.task_indices):
            assert j.job_id in result.pending_reasons
        if j.group_by and tasks:  # a gang, inside a reservation or not: whole, distinct workers, one group
            assert len(j.task_indices) == len(tasks) == len({a.worker_id for a in tasks})
            assert 1 == len({by_worker[a.worker_id].attributes[j.group_by] for a in tasks})
    for r in reservations:
        held = {**r.held, **dict(result.reservation_holds.get(r.reservation_id, ()))}
        if len(held) < len(r.entries):
            assert r.reservation_id in result.reservation_reasons


@settings(max_examples=300, deadline=None)
@given(scenes())
def test_reserved_capacity_is_never_double_booked_and_trees_stay_inside(
    scene: tuple[list[WorkerSnapshot], list[PendingJob], list[Reservation], dict[str, Resources]],
) -> None:
    """Holds, trees and outside work together never pass a worker's capacity; a tree never leaves its reservation."""
    _check_plan(scene)


@settings(max_examples=200, deadline=None)
@given(scenes())
def test_released_capacity_is_placeable_in_the_same_pass(
    scene: tuple[list[WorkerSnapshot], list[PendingJob], list[Reservation], dict[str, Resources]],
) -> None:
    """A released reservation is gone from the pass: the queue gets exactly what it gets with no reservation."""
    workers, jobs, reservations, _ = scene
    outside = [j for j in jobs if governing(j.job_id, {r.job_id: r for r in reservations}) is None]
    held = find_assignments(workers, outside, reservations=reservations)
    released = find_assignments(workers, outside, reservations=[])
    plain = find_assignments(workers, outside)
    assert released.assignments == plain.assignments
    reserved_use = sum(len(r.entries) for r in reservations)
    if reserved_use and len(held.assignments) < len(released.assignments):
        assert any(r.held or held.reservation_holds.get(r.reservation_id) for r in reservations)
