"""Property tests of soft constraints and IN: where preferred tasks land, what reasons say, IN as a union of EQs."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Constraint, PendingJob, Resources, WorkerSnapshot, find_assignments
from scheduler.attributes import evaluate_all, taint_constraints
from scheduler.index import ClusterIndex
from scheduler.preferences import rank

ZONES = ["a", "b", "c", "d"]
SOFT_KEYS = ["pzone", "prack"]  # only soft constraints name these keys
HARD = [
    Constraint("pool", "EQ", "cpu"),
    Constraint("cores", "GE", 2),
    Constraint("zone", "IN", ["a", "b"]),
    Constraint("zone", "NOT_IN", ["c"]),
    Constraint("ssd", "EQ", True),
]
SOFT = [
    Constraint("pzone", "EQ", "a", soft=True),
    Constraint("pzone", "IN", ["b", "c"], soft=True),
    Constraint("prack", "NOT_IN", [1], soft=True),
    Constraint("prack", "EXISTS", soft=True),
    Constraint("pzone", "NE", "d", soft=True),
]


@st.composite
def fleets(draw: st.DrawFn) -> list[WorkerSnapshot]:
    """Workers with hard and soft attributes; some in tpu-name groups whose members share a pzone."""
    workers = []
    group_zone = {f"s{g}": draw(st.sampled_from(ZONES)) for g in range(3)}
    for i in range(draw(st.integers(0, 12))):
        attrs: dict[str, object] = {}
        for key, values in (("pool", ["cpu", "gpu"]), ("cores", [1, 2, 4]), ("zone", ZONES), ("ssd", [True, False]),
                            ("pzone", ZONES), ("prack", [1, 2]), ("taint:x", [True])):  # fmt: skip
            if draw(st.integers(0, 3)):
                attrs[key] = draw(st.sampled_from(values))
        if draw(st.booleans()):
            group = f"s{draw(st.integers(0, 2))}"
            attrs.update({"tpu-name": group, "tpu-worker-id": i, "pzone": group_zone[group]})
        free = Resources(draw(st.integers(0, 4)) * 1000, draw(st.integers(0, 4)), 0, draw(st.sampled_from([0, 4])))
        workers.append(WorkerSnapshot(f"w{i}", free, attrs))  # type: ignore[arg-type]
    return workers


@st.composite
def queues(draw: st.DrawFn, *, gangs: bool = True) -> list[PendingJob]:
    """A queue of plain jobs and gangs, most with one or two preferences."""
    jobs = []
    for j in range(draw(st.integers(1, 6))):
        request = Resources(draw(st.integers(0, 2)) * 1000, draw(st.integers(0, 2)), 0, draw(st.sampled_from([0, 4])))
        jobs.append(
            PendingJob(
                f"j{j}",
                tuple(range(draw(st.integers(1, 4)))),
                request,
                tuple(draw(st.lists(st.sampled_from(HARD), max_size=2, unique=True))),
                group_by=draw(st.sampled_from([None, None, "tpu-name"])) if gangs else None,
                tolerations=draw(st.sampled_from([frozenset(), frozenset({"x"})])),
                preferences=tuple(draw(st.lists(st.sampled_from(SOFT), max_size=2, unique=True))),
            )
        )
    return jobs


def _fits(free: list[int], request: Resources) -> bool:
    return (
        free[0] >= request.cpu_millis
        and free[1] >= request.memory_bytes
        and free[2] >= request.gpus
        and free[3] >= request.tpus
    )


def _feasible(job: PendingJob, worker: WorkerSnapshot, taints: frozenset[str]) -> bool:
    hard = (*job.constraints, *taint_constraints(job.constraints, job.tolerations, taints))
    return evaluate_all(hard, worker.attributes)


@settings(max_examples=300, deadline=None)
@given(fleets(), queues())
def test_a_preferred_task_lands_on_a_matching_worker_whenever_one_has_room(
    workers: list[WorkerSnapshot], jobs: list[PendingJob]
) -> None:
    """Replaying the plan in order: no task (no gang) was put below the best preference tier that had room."""
    result = find_assignments(workers, jobs)
    by_id = {w.worker_id: w for w in workers}
    by_job = {j.job_id: j for j in jobs}
    taints = ClusterIndex.build(workers).taint_keys
    free = {w.worker_id: [w.free.cpu_millis, w.free.memory_bytes, w.free.gpus, w.free.tpus] for w in workers}
    assignments = list(result.assignments)
    position = 0
    while position < len(assignments):
        job = by_job[assignments[position].job_id]
        if job.group_by:  # a gang's assignments are consecutive in the plan
            chosen = assignments[position : position + len(job.task_indices)]
        else:
            chosen = assignments[position : position + 1]
        if job.preferences:
            level = min(rank(job.preferences, by_id[a.worker_id].attributes) for a in chosen)
            better = [
                w for w in workers
                if rank(job.preferences, w.attributes) > level and _feasible(job, w, taints)
                and _fits(free[w.worker_id], job.request)
            ]  # fmt: skip
            if job.group_by:
                groups: dict[object, int] = {}
                for w in better:
                    if "tpu-name" in w.attributes:
                        groups[w.attributes["tpu-name"]] = groups.get(w.attributes["tpu-name"], 0) + 1
                assert all(count < len(chosen) for count in groups.values()), (job, chosen, better)
            else:
                assert not better, (job, chosen, better)
        for a in chosen:
            spent = free[a.worker_id]
            for d, amount in enumerate(
                (job.request.cpu_millis, job.request.memory_bytes, job.request.gpus, job.request.tpus)
            ):
                spent[d] -= amount
            assert min(spent) >= 0
        position += len(chosen)


@settings(max_examples=300, deadline=None)
@given(fleets(), queues())
def test_a_soft_constraint_never_appears_in_a_pending_reason(
    workers: list[WorkerSnapshot], jobs: list[PendingJob]
) -> None:
    """Reasons speak of hard constraints and capacity only; no reason names a key only preferences use."""
    result = find_assignments(workers, jobs)
    for reason in result.pending_reasons.values():
        assert not any(key in reason for key in SOFT_KEYS), reason


@settings(max_examples=300, deadline=None)
@given(fleets(), queues())
def test_preferences_never_change_how_much_of_a_lone_job_runs(
    workers: list[WorkerSnapshot], jobs: list[PendingJob]
) -> None:
    """Alone in the queue, a job places as many tasks with its preferences as without; unplaced, the same reason."""
    for job in jobs:
        bare = dataclasses.replace(job, preferences=())
        with_prefs, without = find_assignments(workers, [job]), find_assignments(workers, [bare])
        assert len(without.assignments) == len(with_prefs.assignments)
        if not with_prefs.assignments:
            assert without.pending_reasons.get(job.job_id) == with_prefs.pending_reasons.get(job.job_id)


@st.composite
def zoned_fleets(draw: st.DrawFn) -> list[WorkerSnapshot]:
    """Workers with a typed `zone` (strings, numbers or booleans); a tpu-name group shares one zone."""
    kind = draw(st.sampled_from([["a", "b", "c", "1"], [1, 2, 3.0, 4], [True, False]]))
    group_zone = {f"s{g}": draw(st.sampled_from(kind)) for g in range(3)}
    workers = []
    for i in range(draw(st.integers(0, 14))):
        attrs: dict[str, object] = {"cores": draw(st.sampled_from([1, 2, 4]))}
        if draw(st.integers(0, 4)):
            attrs["zone"] = draw(st.sampled_from(kind))
        if draw(st.booleans()):
            group = f"s{draw(st.integers(0, 2))}"
            attrs.update({"tpu-name": group, "tpu-worker-id": i, "zone": group_zone[group]})
        free = Resources(draw(st.integers(0, 4)) * 1000, draw(st.integers(0, 4)), 0, draw(st.sampled_from([0, 4])))
        workers.append(WorkerSnapshot(f"w{i}", free, attrs))  # type: ignore[arg-type]
    return workers


@settings(max_examples=300, deadline=None)
@given(zoned_fleets(), st.lists(st.sampled_from(["a", "b", "1", 1, 2, 3.0, True, False]), min_size=1, max_size=3),
       queues())  # fmt: skip
def test_in_over_n_values_places_like_the_union_of_n_eq(
    workers: list[WorkerSnapshot], values: list[object], jobs: list[PendingJob]
) -> None:
    """IN [v1..vn] selects the union of the n EQ matches, and a queue that carries it places exactly as the
    same queue without it on the workers that some EQ v_i matches."""
    kinds = {"b" if isinstance(v, bool) else "n" if isinstance(v, (int, float)) else "s" for v in values}
    if len(kinds) > 1:
        return  # IN takes values of one type (ints and floats are both numbers)
    within = Constraint("zone", "IN", values)
    eqs = [Constraint("zone", "EQ", v) for v in values]  # type: ignore[arg-type]
    index = ClusterIndex.build(workers)
    union = set().union(*(index.matching_workers([c]) for c in eqs))
    assert union == set(index.matching_workers([within]))
    queue = [dataclasses.replace(j, constraints=(within, *j.constraints), preferences=()) for j in jobs]
    plain = [dataclasses.replace(j, preferences=()) for j in jobs]
    subset = [w for row, w in enumerate(workers) if row in union]
    assert find_assignments(subset, plain).assignments == find_assignments(workers, queue).assignments
