"""Multi-slice gangs in the pure scheduler: k distinct groups at once or nothing, task i on slice i // hosts."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.scheduler_bench.gen import add_multislice, generate
from benchmarks.scheduler_bench.validate import validate
from scheduler import PendingJob, Resources, WorkerSnapshot, find_assignments
from scheduler.bench import output_document, schedule_document
from scheduler.types import AttrValue
from tests.scheduler.sched_helpers import gang, job, placed, tpu_slice, worker


def multi(job_id: str, hosts: int, slices: int, **options: object) -> PendingJob:
    """A coscheduled TPU job of `slices` slices of `hosts` hosts each."""
    return replace(gang(job_id, hosts * slices, **options), num_groups=slices)  # type: ignore[arg-type]


def test_two_slices_task_i_on_host_i_mod_hosts_of_slice_i_div_hosts() -> None:
    """Tasks 0-1 run on slice-a's hosts 0 and 1, tasks 2-3 on slice-b's, in tpu-worker-id order."""
    workers = tpu_slice("slice-b", 2) + tpu_slice("slice-a", 2)
    result = find_assignments(workers, [multi("m", 2, 2)])
    assert {0: "slice-a-w0", 1: "slice-a-w1", 2: "slice-b-w0", 3: "slice-b-w1"} == placed(result, "m")
    assert "m" not in result.pending_reasons


def test_never_holds_part_of_a_multi_slice_gang() -> None:
    """With one free slice of the two needed, nothing is placed and the reason counts the groups that fit."""
    workers = tpu_slice("a", 2) + tpu_slice("b", 2)
    result = find_assignments(workers, [gang("single", 2), multi("m", 2, 2), job("small", 1, tpus=4)])
    assert {} == placed(result, "m")
    assert (
        "only 1 of 2 tpu-name groups fit (2 free workers each): the next best has 0 free (2 have < 4 free tpus)"
        == result.pending_reasons["m"]
    )
    assert 1 == len(placed(result, "small"))  # backfill: the unplaced gang held nothing


def test_too_few_groups_at_all_is_explained() -> None:
    """A 3-slice job on a fleet of two slices says how many groups have enough matching workers."""
    result = find_assignments(tpu_slice("a", 2) + tpu_slice("b", 2), [multi("m", 2, 3)])
    assert "only 2 of 3 tpu-name groups have 2 matching workers each" == result.pending_reasons["m"]


def test_uneven_split_is_never_placed() -> None:
    """Three tasks over two groups cannot be split evenly: pending with a reason, nothing placed."""
    uneven = replace(gang("m", 3), num_groups=2)
    result = find_assignments(tpu_slice("a", 2) + tpu_slice("b", 2), [uneven])
    assert {} == placed(result, "m")
    assert "3 tasks do not split evenly over 2 tpu-name groups" == result.pending_reasons["m"]


def test_best_fit_takes_exact_slices_and_keeps_the_big_one_whole() -> None:
    """A 2 x 2-host job takes the two 2-host slices, leaving the 4-host slice for a 4-host gang."""
    workers = tpu_slice("big", 4) + tpu_slice("s1", 2) + tpu_slice("s2", 2)
    result = find_assignments(workers, [multi("m", 2, 2), gang("whole", 4)])
    assert {"s1", "s2"} == {w.rsplit("-", 1)[0] for w in placed(result, "m").values()}
    assert 4 == len(placed(result, "whole"))


def test_one_slice_per_group_even_when_a_group_could_host_two_parts() -> None:
    """An 8-host slice alone never hosts both halves of a 2 x 4-host job: the groups must be distinct."""
    result = find_assignments(tpu_slice("big", 8), [multi("m", 4, 2)])
    assert {} == placed(result, "m")


def test_a_starving_multi_slice_gang_holds_k_groups() -> None:
    """A starving 2-slice job holds the two groups closest to fitting, so later plain tasks cannot use them."""
    workers = tpu_slice("a", 2) + tpu_slice("b", 2) + [worker("cpu", tpus=4)]
    busy = [replace(w, free=Resources(16000, 32 << 30, 0, 0)) if w.worker_id == "a-w0" else w for w in workers]
    starving = multi("m", 2, 2, waited_seconds=10_000.0)
    result = find_assignments(busy, [starving, job("p", 5, tpus=4)])
    assert {} == placed(result, "m")
    assert result.pending_reasons["m"].endswith("holding tpu-name=a,b for it (waited 10000s)")
    assert {"cpu"} == set(placed(result, "p").values())


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[WorkerSnapshot], list[PendingJob]]:
    """Draw slices of 1-4 hosts with random free tpus, and a queue of multi-slice gangs, gangs and plain jobs."""
    workers: list[WorkerSnapshot] = []
    for s in range(draw(st.integers(0, 6))):
        for host in draw(st.permutations(range(draw(st.integers(1, 4))))):
            free = Resources(16000, 32 << 30, 0, draw(st.sampled_from([0, 4, 4, 8])))
            attrs: dict[str, AttrValue] = {"tpu-name": f"s{s}", "tpu-worker-id": host}
            workers.append(WorkerSnapshot(f"s{s}-w{host}", free, attrs))
    jobs: list[PendingJob] = []
    for j in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["multi", "multi", "gang", "plain"]))
        if kind == "plain":
            jobs.append(job(f"j{j}", draw(st.integers(1, 4)), tpus=4))
        elif kind == "gang":
            jobs.append(gang(f"j{j}", draw(st.integers(1, 4))))
        else:
            jobs.append(multi(f"j{j}", draw(st.integers(1, 3)), draw(st.integers(2, 3)),
                              waited_seconds=draw(st.sampled_from([0.0, 10_000.0]))))  # fmt: skip
    return workers, jobs


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_multi_slice_gangs_are_whole_on_k_distinct_groups_or_absent(drawn: tuple[list, list]) -> None:
    """Every multi-slice gang is placed whole on k distinct groups, slice s's hosts in order, or not at all."""
    workers, jobs = drawn
    result = find_assignments(workers, jobs)
    by_id = {w.worker_id: w for w in workers}
    tpus_used: dict[str, int] = {}
    for a in result.assignments:
        tpus_used[a.worker_id] = tpus_used.get(a.worker_id, 0) + 4
    for worker_id, used in tpus_used.items():
        assert used <= by_id[worker_id].free.tpus
    for pending in jobs:
        if pending.num_groups < 2:
            continue
        got = placed(result, pending.job_id)
        if not got:
            assert pending.job_id in result.pending_reasons
            continue
        per = len(pending.task_indices) // pending.num_groups
        assert set(pending.task_indices) == set(got)
        slices = [[by_id[got[i]] for i in range(s * per, (s + 1) * per)] for s in range(pending.num_groups)]
        names = [{w.attributes["tpu-name"] for w in hosts} for hosts in slices]
        assert all(1 == len(n) for n in names)
        assert pending.num_groups == len({n.pop() for n in names})
        for hosts in slices:
            ids = [w.attributes["tpu-worker-id"] for w in hosts]
            assert sorted(ids) == ids


@settings(max_examples=10, deadline=None)
@given(st.integers(20, 300), st.integers(0, 2000), st.integers(0, 10**6))
def test_multislice_bench_outputs_pass_the_validator(workers: int, tasks: int, seed: int) -> None:
    """On generated inputs with multi-slice gangs, every plan passes the bench validator's slice checks."""
    doc = add_multislice(generate(workers, tasks, seed), 0.6, seed)
    assignments, seconds = schedule_document(doc)
    assert [] == validate(doc, output_document(assignments, seconds))


def test_validator_catches_a_multi_slice_gang_on_one_group() -> None:
    """Both slices of a 2-slice job on one tpu-name, or one slice split over two, are violations."""
    workers = [
        {"id": f"{name}-{i}", "cpu": 8, "memory_bytes": 1 << 30, "gpus": 0, "tpus": 4,
         "attributes": {"tpu-name": name, "tpu-worker-id": i}}
        for name in ("a", "b") for i in range(4)
    ]  # fmt: skip
    doc = {"workers": workers, "jobs": [{"id": "m", "replicas": 4, "cpu": 1, "memory_bytes": 0, "gpus": 0, "tpus": 4,
                                         "coschedule_group_by": "tpu-name", "coschedule_num_groups": 2}]}  # fmt: skip

    def out(*hosts: str) -> dict[str, object]:
        placed = [{"job": "m", "task_index": i, "worker": w} for i, w in enumerate(hosts)]
        return {"seconds": 0.0, "assignments": placed}

    assert [] == validate(doc, out("a-0", "a-1", "b-0", "b-1"))
    assert [True] == ["not on 2 distinct values" in e for e in validate(doc, out("a-0", "a-1", "a-2", "a-3"))]
    assert any("slice 0 does not share" in e for e in validate(doc, out("a-0", "b-1", "b-0", "a-1")))
