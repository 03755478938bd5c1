"""Property tests: the index agrees with brute force, and every plan obeys the bench rules."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.scheduler_bench.gen import generate, generate_fragmented
from benchmarks.scheduler_bench.validate import validate
from scheduler import Constraint, Op, PendingJob, Resources, WorkerSnapshot, find_assignments
from scheduler.attributes import evaluate_all
from scheduler.bench import output_document, schedule_document
from scheduler.index import ClusterIndex

KEYS = ["zone", "cores", "ssd", "tpu-worker-id", "hostname", "taint:x"]
values = st.one_of(
    st.sampled_from(["a", "b", "1"]),
    st.integers(-2, 3),
    st.sampled_from([0.5, 1.0, 2.0, -0.0, float("inf")]),
    st.booleans(),
)
attributes = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)


@st.composite
def constraints(draw: st.DrawFn) -> Constraint:
    """Draw a valid constraint over the shared keys and values."""
    op = draw(st.sampled_from(list(Op)))
    key = draw(st.sampled_from([*KEYS, "missing"]))
    if op in (Op.EXISTS, Op.NOT_EXISTS):
        return Constraint(key, op)
    if op in (Op.GT, Op.GE, Op.LT, Op.LE):
        return Constraint(key, op, draw(st.one_of(st.integers(-2, 3), st.sampled_from([0.5, 1.0, 2.5]))))
    if op in (Op.IN, Op.NOT_IN):
        kind = draw(st.sampled_from([st.sampled_from(["a", "b", "1"]), st.integers(-2, 3), st.booleans()]))
        return Constraint(key, op, draw(st.lists(kind, min_size=1, max_size=3)))
    return Constraint(key, op, draw(values))


@settings(max_examples=300, deadline=None)
@given(st.lists(attributes, max_size=25), st.lists(constraints(), max_size=4))
def test_index_matches_brute_force(rows: list[dict[str, object]], wanted: list[Constraint]) -> None:
    """The class/posting/bisect index selects exactly the workers the reference evaluator accepts."""
    workers = [WorkerSnapshot(f"w{i}", Resources(), attrs) for i, attrs in enumerate(rows)]  # type: ignore[arg-type]
    index = ClusterIndex.build(workers)
    expected = {i for i, w in enumerate(workers) if evaluate_all(wanted, w.attributes)}
    assert expected == set(index.matching_workers(wanted))
    assert expected == {i for i, bit in enumerate(index.feasible_mask(wanted)) if bit}


@settings(max_examples=300, deadline=None)
@given(st.lists(attributes, max_size=25), st.lists(constraints(), max_size=4))
def test_reason_counts_match_brute_force(rows: list[dict[str, object]], wanted: list[Constraint]) -> None:
    """count_excluded charges each worker to the first constraint that rejects it (class-level or not)."""
    workers = [WorkerSnapshot(f"w{i}", Resources(), attrs) for i, attrs in enumerate(rows)]  # type: ignore[arg-type]
    counts, remaining = ClusterIndex.build(workers).count_excluded(wanted)
    expected, left = [], set(range(len(workers)))
    for constraint in wanted:
        kept = {i for i in left if evaluate_all([constraint], workers[i].attributes)}
        expected.append(len(left) - len(kept))
        left = kept
    assert (expected, left) == (counts, set(remaining))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[WorkerSnapshot], list[PendingJob]]:
    """Draw a small cluster (some workers in tpu-name groups) and a queue of plain jobs and gangs."""
    workers = []
    for i in range(draw(st.integers(0, 12))):
        attrs = draw(attributes)
        if draw(st.booleans()):
            attrs = {**attrs, "tpu-name": f"s{draw(st.integers(0, 2))}", "tpu-worker-id": i}
        free = Resources(
            draw(st.integers(0, 4)) * 1000, draw(st.integers(0, 4)), 0, draw(st.sampled_from([0, 4]))
        )
        workers.append(WorkerSnapshot(f"w{i}", free, attrs))
    jobs = []
    for j in range(draw(st.integers(0, 8))):
        request = Resources(
            draw(st.integers(0, 2)) * 1000, draw(st.integers(0, 2)), 0, draw(st.sampled_from([0, 4]))
        )
        group_by = draw(st.sampled_from([None, None, "tpu-name"]))
        jobs.append(
            PendingJob(
                f"j{j}",
                tuple(range(draw(st.integers(0, 4)))),
                request,
                tuple(draw(st.lists(constraints(), max_size=2))),
                group_by=group_by,
                priority=draw(st.integers(0, 1)),
                waited_seconds=draw(st.sampled_from([0.0, 1000.0])),
                tolerations=draw(st.sampled_from([frozenset(), frozenset({"x"})])),
            )
        )
    return workers, jobs


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_plans_respect_capacity_constraints_and_gangs(
    cluster: tuple[list[WorkerSnapshot], list[PendingJob]],
) -> None:
    """No worker is overcommitted, constraints and taints hold, tasks are unique, gangs are whole."""
    workers, jobs = cluster
    result = find_assignments(workers, jobs)
    by_id = {w.worker_id: w for w in workers}
    used: dict[str, Resources] = {}
    seen = set()
    for a in result.assignments:
        job = next(j for j in jobs if j.job_id == a.job_id)
        w = by_id[a.worker_id]
        assert (a.job_id, a.task_index) not in seen
        seen.add((a.job_id, a.task_index))
        assert evaluate_all(job.constraints, w.attributes)
        assert (
            "taint:x" not in w.attributes
            or "x" in job.tolerations
            or any(c.key == "taint:x" for c in job.constraints)
        )
        used[a.worker_id] = used.get(a.worker_id, Resources()) + job.request
    for worker_id, total in used.items():
        assert total.fits_in(by_id[worker_id].free)
    for job in jobs:
        tasks = [a for a in result.assignments if a.job_id == job.job_id]
        if job.group_by and tasks:
            assert len(job.task_indices) == len(tasks) == len({a.worker_id for a in tasks})
            assert 1 == len({by_id[a.worker_id].attributes[job.group_by] for a in tasks})
        if len(tasks) < len(job.task_indices):
            assert job.job_id in result.pending_reasons


@settings(max_examples=15, deadline=None)
@given(st.integers(20, 300), st.integers(0, 2000), st.integers(0, 10**6))
def test_bench_outputs_pass_the_validator(workers: int, tasks: int, seed: int) -> None:
    """Scheduler output on generated bench inputs passes every check of the bench validator."""
    doc = generate(workers, tasks, seed)
    assignments, seconds = schedule_document(doc)
    assert [] == validate(doc, output_document(assignments, seconds))


def test_validator_catches_each_violation() -> None:
    """The validator reports overcommit, a broken constraint, a duplicate task and a split gang."""
    doc = generate_fragmented(40)
    gang_job = next(j for j in doc["jobs"] if j["id"] == "small-gang-0")
    plain = doc["jobs"][0]
    cpu_worker = next(w for w in doc["workers"] if w["id"].startswith("cpu"))
    bad = {
        "seconds": 0.0,
        "assignments": [
            {"job": plain["id"], "task_index": 0, "worker": cpu_worker["id"]},
            {"job": plain["id"], "task_index": 0, "worker": cpu_worker["id"]},
            {"job": plain["id"], "task_index": 1, "worker": cpu_worker["id"]},
            {"job": plain["id"], "task_index": 2, "worker": cpu_worker["id"]},
            {"job": gang_job["id"], "task_index": 0, "worker": cpu_worker["id"]},
        ],
    }
    errors = validate(doc, bad)
    kinds = {
        kind
        for kind in ("twice", "over capacity", "does not hold", "tasks assigned")
        if any(kind in e for e in errors)
    }
    assert {"twice", "over capacity", "does not hold", "tasks assigned"} == kinds


def test_fragmented_case_best_fit_beats_first_fit() -> None:
    """On the fragmented fleet, best fit places strictly more coscheduled jobs than first fit."""
    from benchmarks.scheduler_bench.baseline import first_fit
    from scheduler.bench import parse_jobs, parse_workers

    doc = generate_fragmented(120)
    ours = find_assignments(parse_workers(doc), parse_jobs(doc))
    theirs, _ = first_fit(parse_workers(doc), parse_jobs(doc))
    gangs = {j["id"] for j in doc["jobs"] if j["coschedule_group_by"]}
    assert len({a.job_id for a in ours.assignments} & gangs) > len({a.job_id for a in theirs} & gangs)


_FREE = st.one_of(st.tuples(*[st.integers(0, 3)] * 4), st.just((-1, -1, -1, -1)))  # free, or held (-1 in all)
_AMOUNT = st.tuples(*[st.integers(0, 2)] * 4)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("find"), st.tuples(*[st.integers(0, 3)] * 4)),
        st.tuples(st.just("take"), st.integers(0, 39), _AMOUNT),  # a placement: free capacity only goes down
        st.tuples(st.just("hold"), st.integers(0, 39)),  # held for a starving job: -1 in every column
        st.tuples(st.just("give back"), st.integers(0, 39), _AMOUNT),  # a tentative hold undone: up again
    ),
    max_size=30,
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_FREE, min_size=1, max_size=40), _OPS)
def test_capacity_tree_finds_the_first_member_that_fits(free: list[tuple[int, int, int, int]], ops: list[Any]) -> None:
    """Through a pass's changes (placements taking capacity, members held, a tentative hold given back),
    every search returns the first member, in order, whose free capacity covers the request; a held
    member fits nothing. The tree remembers earlier answers: a stale one would show here."""
    from scheduler.capacity import CapacityTree

    columns = [[f[d] for f in free] for d in range(4)]
    tree = CapacityTree(range(len(free)), *columns, bytearray(len(free)))

    def first(request: tuple[int, ...]) -> int:
        """The oracle: a scan in member order, skipping held members (-1 cpu, whatever the request)."""
        cpu = columns[0]
        fits = (p for p in range(len(free)) if cpu[p] >= 0 and all(columns[d][p] >= request[d] for d in range(4)))
        return next(fits, -1)

    for op, *args in ops:
        if op == "find":
            assert first(args[0]) == tree.first_fit(*args[0])
            continue
        position = args[0]
        if position >= len(free) or columns[0][position] < 0:
            continue
        if op == "hold":
            values = [-1] * 4
        else:
            sign = -1 if op == "take" else 1
            values = [max(0, columns[d][position] + sign * args[1][d]) for d in range(4)]
        for d in range(4):
            columns[d][position] = values[d]
        (tree.give_back if op == "give back" else tree.update)(position, *values)


def test_a_capacity_tree_forgets_its_answers_when_capacity_comes_back() -> None:
    """A tentative hold given back makes room before the answer the tree last gave, or where it had none."""
    from scheduler.capacity import CapacityTree

    tree = CapacityTree(range(3), [1, 1, 2], [1, 1, 2], [0, 0, 0], [0, 0, 0], bytearray(3))
    assert tree.first_fit(2, 1, 0, 0) == 2
    tree.give_back(0, 2, 1, 0, 0)
    assert tree.first_fit(2, 1, 0, 0) == 0
    tree.update(0, 0, 0, 0, 0)
    tree.update(2, 0, 0, 0, 0)
    assert tree.first_fit(2, 1, 0, 0) == -1
    tree.give_back(1, 3, 3, 0, 0)
    assert tree.first_fit(2, 1, 0, 0) == 1
