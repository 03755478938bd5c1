"""The placements' index (workflows/scheduler/placement_index.py): what each worker has committed and each job's
placements stay exactly what a recount of every placement gives, whatever happens to them."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placement, Placements
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry, committed
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

NOW = 1_000.0


def _scheduler() -> SchedulerWorkflow:
    """The scheduler's own commit, release and worker removal, run outside a workflow: a release is
    charged at a fixed time instead of the workflow's clock."""
    scheduler = SchedulerWorkflow()
    scheduler.core.clock = lambda: NOW
    return scheduler


def recount(placements: dict[str, Placement]) -> tuple[dict[str, list[int]], dict[str, dict[str, Placement]]]:
    """What the index must hold, from every placement."""
    used: dict[str, list[int]] = {}
    jobs: dict[str, dict[str, Placement]] = {}
    for key, p in placements.items():
        u = used.setdefault(p.worker_id, [0, 0, 0, 0])
        for i, n in enumerate((p.cpu_millis, p.memory_bytes, p.gpus, p.tpus)):
            u[i] += n
        jobs.setdefault(p.job_id, {})[key] = p
    return used, jobs


def assert_exact(state: SchedulerState) -> None:
    used, jobs = recount(state.placements)
    assert used == state.placements.used == committed(state)
    assert jobs == state.placements.jobs
    users: dict[str, int] = {}
    for p in state.placements.values():
        users[p.user] = users.get(p.user, 0) + 1
    assert users == state.placements.users


def _fleet(rng: random.Random, workers: int) -> SchedulerState:
    state = SchedulerState()
    for i in range(workers):
        w = WorkerEntry(f"w{i}", "s", 4_000, 8 << 30, rng.choice((0, 2)), rng.choice((0, 4)), {"zone": f"z{i % 2}"})
        state.workers[w.worker_id] = w
    return state


def _enqueue(rng: random.Random, state: SchedulerState, serial: int) -> None:
    spec = SchedulingSpec(cpu_millis=rng.choice((250, 500, 1000)), memory_bytes=rng.choice((1, 2)) << 30,
                          gpus=rng.choice((0, 0, 1)), group_by=rng.choice(("", "", "zone")),
                          user=f"u{serial % 3}")  # fmt: skip
    job_id = f"job-{serial}"
    state.pending[job_id] = PendingEntry(job_id, spec, dict.fromkeys(range(rng.randint(1, 6)), 0), NOW)


def _plan(rng: random.Random, state: SchedulerState) -> pb.SchedulingPlan:
    """Assignments of queued tasks to random workers (some stale, some over capacity): the commit decides."""
    plan = pb.SchedulingPlan()
    ids = list(state.workers)
    for entry in list(state.pending.values())[:4]:
        for index in entry.attempts:
            plan.assignments.add(job_id=entry.job_id, task_index=index, worker_id=rng.choice(ids))
    return plan


@pytest.mark.parametrize("seed", range(12))
def test_index_equals_a_recount_through_any_sequence(seed: int) -> None:
    """Commits, releases, claims of a newer attempt, lost and removed workers and continue-as-new, in
    random order: after each, per-worker used capacity and per-job placements equal a full recount."""
    rng = random.Random(seed)
    scheduler = _scheduler()
    scheduler.state = _fleet(rng, 8)
    serial = peak = 0
    for _ in range(150):
        state = scheduler.state
        op = rng.choice(("enqueue", "commit", "commit", "release", "claim", "lose", "forget", "carry", "register"))
        if op == "enqueue":
            serial += 1
            _enqueue(rng, state, serial)
        elif op == "commit" and state.pending:
            scheduler.queue.commit(_plan(rng, state), now=NOW)
        elif op == "release" and state.placements:
            key = rng.choice(list(state.placements))
            p = state.placements[key]
            attempt = p.attempt if rng.random() < 0.8 else p.attempt + 1  # a stale release changes nothing
            scheduler.queue.release_place(p.job_id, p.task_index, attempt)
        elif op == "claim" and state.placements:
            # A newer attempt of a placed task claims its place on another worker (a run that started empty).
            key = rng.choice(list(state.placements))
            p = state.placements[key]
            state.placements[key] = Placement(p.job_id, p.task_index, p.attempt + 1, rng.choice(list(state.workers)),
                                              p.cpu_millis, p.memory_bytes, p.gpus, p.tpus, user=p.user)  # fmt: skip
        elif op == "lose" and state.workers and rng.random() < 0.3:
            rng.choice(list(state.workers.values())).state = WorkerState.LOST
        elif op == "forget" and state.workers and rng.random() < 0.3:
            scheduler.registry.forget([rng.choice(list(state.workers))])
        elif op == "register":
            w = WorkerEntry(f"w{len(state.workers) + serial}", "s", 4_000, 8 << 30, 1, 0, {"zone": "z0"})
            state.workers[w.worker_id] = w
        elif op == "carry":
            scheduler.state = unpack(pack(state))
            assert dict(state.placements) == dict(scheduler.state.placements)
        assert_exact(scheduler.state)
        peak = max(peak, len(scheduler.state.placements))
    assert peak >= 5, "the sequence placed something"


def test_every_dict_change_keeps_the_index() -> None:
    """pop, popitem, setdefault, update, clear, copies and pickles: the index follows each."""

    def place(i: int, worker: str) -> Placement:
        return Placement(f"j{i % 2}", i, 0, worker, 100 * (i + 1), 1 << 20, i % 2, 0)

    def key(i: int) -> str:
        return task_workflow_id(f"j{i % 2}", i)

    placements = Placements({key(0): place(0, "a")})
    placements.update({key(1): place(1, "b")}, **{key(2): place(2, "a")})
    placements[key(3)] = place(3, "b")
    placements.setdefault(key(4), place(4, "a"))
    placements.setdefault(key(4), Placement("j0", 4, 1, "b", 1, 1, 0, 0))  # present: unchanged
    assert place(4, "a") == placements[key(4)]
    assert place(2, "a") == placements.pop(key(2))
    assert None is placements.pop("absent", None)
    assert None is placements.pop("j0/task-77", None)
    placements.popitem()
    for copied in (copy.copy(placements), copy.deepcopy(placements), pickle.loads(pickle.dumps(placements))):
        assert (placements.used, placements.jobs) == (copied.used, copied.jobs)
        assert placements == copied
    assert (placements.used, placements.jobs) == recount(placements)
    placements.clear()
    assert ({}, {}, {}) == (placements.used, placements.jobs, placements.users)


def test_a_jobs_places_placed_in_one_step_are_those_placed_one_by_one() -> None:
    """The commit places a job's tasks in one step: the same places, totals, ports and order as one at a time,
    and a task that already held a place (an older attempt) holds only the new one."""
    shape = (500, 1 << 20, 0, 1, "ann", "batch", True)
    places = [(3, 0, "a"), (1, 0, "b"), (7, 2, "a")]
    ports = {1: {"http": 8080}}
    one_by_one, in_one_step = Placements(), Placements()
    for placements in (one_by_one, in_one_step):
        placements[task_workflow_id("j", 1)] = Placement("j", 1, 0, "c", 100, 1, 0, 0, user="bob")  # elsewhere
        placements[task_workflow_id("k", 0)] = Placement("k", 0, 0, "a", 100, 1, 0, 0, user="bob")
    for index, attempt, worker in places:
        one_by_one[task_workflow_id("j", index)] = Placement("j", index, attempt, worker, *shape[:4],
                                                             ports.get(index, {}), *shape[4:], NOW)  # fmt: skip
    in_one_step.place_job("j", shape, places, NOW, ports)
    assert one_by_one == in_one_step
    assert (one_by_one.used, one_by_one.users) == (in_one_step.used, in_one_step.users)
    assert one_by_one.jobs == in_one_step.jobs
    assert {"a": [1_100, 2 * (1 << 20) + 1, 0, 2], "b": [500, 1 << 20, 0, 1]} == in_one_step.used  # nothing left on c
    assert {"http": 8080} == in_one_step[task_workflow_id("j", 1)].ports
    assert 2 == in_one_step.placed_attempt("j", 7)
    assert in_one_step == Placements.from_carried(in_one_step.carried())
    assert (in_one_step.used, in_one_step.jobs) == recount(in_one_step)


def test_a_placement_is_kept_only_under_its_own_task_workflow_id() -> None:
    """The messages key a place by job and task index: a placement under another id is refused, not misfiled."""
    placements = Placements()
    with pytest.raises(ValueError, match="stored under 'x/task-2'"):
        placements["x/task-2"] = Placement("j0", 2, 0, "a", 1, 1, 0, 0)
    assert 0 == len(placements)
    assert "x/task-2" not in placements and "not a task id" not in placements


def test_carried_placements_come_back_whole_with_their_index() -> None:
    """What a run hands over (messages): every placement with its ports, band and times, the per-worker
    totals, the users' counts and the jobs' order (a map has none on the wire)."""
    placements = Placements()
    for n, job_id in enumerate(("zeta", "alpha", "mid/child", "beta")):
        for i in range(n + 1):
            ports = {"http": 8000 + i} if job_id == "alpha" else {}
            placements[task_workflow_id(job_id, i)] = Placement(job_id, i, n, f"w{(n + i) % 3}", 250 * (i + 1),
                                                                1 << 20, i % 2, 4 * (n % 2), ports, f"u{n % 2}",
                                                                "batch", n == 2, 10.5 + i)  # fmt: skip
    loaded = Placements.from_carried(placements.carried())
    assert loaded == placements
    assert [task_workflow_id("alpha", 0), task_workflow_id("alpha", 1)] == loaded.holding_ports()
    assert list(loaded.jobs) == ["zeta", "alpha", "mid/child", "beta"]
    assert (loaded.used, loaded.users) == (placements.used, placements.users)
    assert {8001: "http"} == {v: k for k, v in loaded[task_workflow_id("alpha", 1)].ports.items()}
    del loaded[task_workflow_id("beta", 0)]  # the index goes on from the carried totals
    assert (loaded.used, loaded.jobs) == recount(loaded)
    assert loaded.count_on("w0") == sum(1 for p in loaded.values() if p.worker_id == "w0")
    broken = pb.PlacedState.FromString(loaded.carried())
    broken.tasks += 1
    with pytest.raises(ValueError, match="do not add up: 4 job ids for 4 jobs, 10 placements for 9 on workers"):
        Placements.from_carried(broken.SerializeToString())


def test_a_loaded_carry_reads_changes_and_carries_its_jobs_in_order() -> None:
    """A run reads only the jobs it asks for from a carry (job_columns.JobColumns), so asking of a job that holds
    no place must add nothing, and a job emptied and placed again goes to the end of the order, as before a carry."""
    placements = Placements()
    for job_id in ("c", "a", "b"):
        placements.place_job(job_id, (250, 1 << 20, 0, 0, "u", "", False), [(0, 1, "w0"), (1, 1, "w1")], NOW)
    loaded = Placements.from_carried(placements.carried())
    assert (loaded.placed("nope"), loaded.columns("nope"), list(loaded.of_job("nope"))) == (0, None, [])
    assert task_workflow_id("nope", 0) not in loaded and loaded.placed_attempt("nope", 0) == -1
    assert loaded.release(task_workflow_id("a", 0), 1) is not None
    assert loaded.release(task_workflow_id("a", 1), 1) is not None  # "a" holds no place now
    loaded.place_job("a", (500, 1 << 20, 0, 0, "u", "", False), [(3, 2, "w2")], NOW + 1)
    again = Placements.from_carried(loaded.carried())
    assert list(again.jobs) == ["c", "b", "a"] and "nope" not in again.jobs
    assert again == loaded and len(again) == 5
    assert (again.used, again.jobs) == recount(again)
    assert again[task_workflow_id("a", 3)].worker_id == "w2"


@pytest.mark.parametrize("seed", range(4))
def test_reservation_book_reads_the_index_as_a_recount_would(seed: int) -> None:
    """A reservation's book (work outside the trees per worker; each tree's use per worker) reads the
    index and the trees' placements only: it equals what adding up every placement gives."""
    from workflows.scheduler.reservation_state import Book, HeldReservation

    rng = random.Random(seed)
    state = _fleet(rng, 6)
    for reserving in ("r1", "r1/a"):
        state.reservations[f"rsv-{reserving}"] = HeldReservation(f"rsv-{reserving}", reserving, "u",
                                                                 [[100, 1, 0, 0]], [], [], NOW)  # fmt: skip
    for n in range(60):
        job_id = rng.choice(("r1/x", "r1/a/b", "r1/a", "other", "r2/y", "r1"))
        state.placements[task_workflow_id(job_id, n)] = Placement(job_id, n, 0, rng.choice(list(state.workers)),
                                                                  rng.choice((100, 300)), 1 << 20, 0, 0)  # fmt: skip
    book = Book(state)
    outside: dict[str, list[int]] = {}
    used: dict[tuple[str, str], list[int]] = {}
    for p in state.placements.values():
        root = book.root_of(p.job_id)
        row = outside.setdefault(p.worker_id, [0, 0, 0, 0]) if root is None else used.setdefault(
            (root, p.worker_id), [0, 0, 0, 0])  # fmt: skip
        for i, n in enumerate((p.cpu_millis, p.memory_bytes, p.gpus, p.tpus)):
            row[i] += n
    assert used == book.used
    assert outside == {w: u for w, u in book.outside.items() if any(u)}
    assert all(not any(u) for w, u in book.outside.items() if w not in outside)


def test_a_release_takes_the_place_only_of_the_attempt_that_holds_it() -> None:
    """A stale attempt's release leaves the newer attempt's place; the holder's gives it back and returns it."""
    placements = Placements()
    placements["a/task-0"] = Placement("a", 0, 2, "w", 100, 1, 0, 0, {"http": 9}, "ana")
    placements["a/task-1"] = Placement("a", 1, 0, "w", 100, 1, 0, 0, user="ana")
    assert None is placements.release("a/task-0", 1) and None is placements.release("a/task-7", 0)
    assert 2 == len(placements) and [200, 2, 0, 0] == placements.used["w"]
    released = placements.release("a/task-0", 2)
    assert released is not None and {"http": 9} == released.ports and 2 == released.attempt
    assert "a/task-0" not in placements and [100, 1, 0, 0] == placements.used["w"]
    assert (placements.used, placements.jobs) == recount(placements)


def test_the_attempt_holding_a_place_is_read_without_the_place() -> None:
    """What an enqueue checks (an attempt already placed is not queued again): the holding attempt, -1 if none."""
    placements = Placements()
    placements["a/task-0"] = Placement("a", 0, 2, "w", 100, 1, 0, 0, user="ana")
    placements["a/task-3"] = Placement("a", 3, 0, "v", 100, 1, 0, 0, user="ana")
    assert (2, 0, -1, -1) == tuple(placements.placed_attempt(j, i) for j, i in (("a", 0), ("a", 3), ("a", 1), ("b", 0)))
    del placements["a/task-0"]
    assert (-1, 0) == (placements.placed_attempt("a", 0), placements.placed_attempt("a", 3))
