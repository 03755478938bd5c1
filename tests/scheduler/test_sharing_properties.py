"""Property tests of sharing: evictions are whole gangs of strictly lower bands for a placed job; no starvation."""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import (
    BAND_RANK,
    Accounts,
    Band,
    Charge,
    DecayedUsage,
    GroupHeadroom,
    PendingJob,
    Resources,
    RunningJob,
    RunningTask,
    SchedulingResult,
    ShareSnapshot,
    UserAccount,
    WorkerSnapshot,
    charge_all,
    find_assignments,
)

GIB = 1 << 30
NOW = 50_000.0
USERS = ("ana", "bob", "cy")
running_bands = st.sampled_from([Band.BATCH, Band.BATCH, Band.INTERACTIVE, Band.PRODUCTION])
pending_bands = st.sampled_from([Band.PRODUCTION, Band.INTERACTIVE, Band.INTERACTIVE, Band.BATCH])
TPU_HOST = Resources(16000, 32 * GIB, 0, 4)
CPU_HOST = Resources(8000, 32 * GIB, 0, 0)

Cluster = tuple[list[WorkerSnapshot], list[PendingJob], ShareSnapshot]


@st.composite
def shared_clusters(draw: st.DrawFn) -> Cluster:
    """Draw slices and CPU hosts partly filled by running gangs and tasks of all bands, and a mixed queue."""
    capacity: dict[str, Resources] = {}
    attributes: dict[str, dict[str, object]] = {}
    slices: list[list[str]] = []
    for s in range(draw(st.integers(0, 3))):
        ids = [f"s{s}-w{i}" for i in range(draw(st.integers(1, 4)))]
        slices.append(ids)
        for i, worker_id in enumerate(ids):
            capacity[worker_id] = TPU_HOST
            attributes[worker_id] = {"tpu-name": f"s{s}", "tpu-worker-id": i}
    for c in range(draw(st.integers(0, 3))):
        capacity[f"c{c}"] = CPU_HOST
        attributes[f"c{c}"] = {}
    free = dict(capacity)
    runs: list[RunningJob] = []

    def start(job_id: str, worker_ids: list[str], request: Resources, coscheduled: bool) -> None:
        if not worker_ids or any(not request.fits_in(free[w]) for w in worker_ids):
            return
        if len(set(worker_ids)) < len(worker_ids) and coscheduled:
            return
        for w in worker_ids:
            free[w] = free[w] - request
        started = NOW - draw(st.sampled_from([0.0, 60.0, 3600.0, 7200.0]))
        tasks = tuple(RunningTask(i, w, started) for i, w in enumerate(worker_ids))
        runs.append(RunningJob(job_id, draw(st.sampled_from(USERS)), draw(running_bands), request, tasks, coscheduled))

    for s, ids in enumerate(slices):
        if draw(st.integers(0, 3)):
            count = draw(st.integers(1, len(ids)))
            request = Resources(draw(st.integers(1, 8)) * 1000, GIB, 0, draw(st.sampled_from([2, 4])))
            start(f"run-gang-{s}", ids[:count], request, True)
    names = list(capacity)
    for r in range(draw(st.integers(0, 4))):
        if not names:
            break
        hosts = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
        request = Resources(draw(st.integers(1, 4)) * 1000, GIB, 0, draw(st.sampled_from([0, 2])))
        start(f"run-plain-{r}", hosts, request, False)

    workers = [WorkerSnapshot(w, free[w], attributes[w], capacity[w]) for w in capacity]  # type: ignore[arg-type]
    jobs = []
    for j in range(draw(st.integers(1, 6))):
        coscheduled = draw(st.booleans())
        tasks = draw(st.integers(1, 4))
        request = Resources(draw(st.integers(1, 8)) * 1000, GIB, 0, draw(st.sampled_from([0, 2, 4])))
        jobs.append(
            PendingJob(
                f"pend-{j}",
                tuple(range(tasks)),
                request,
                group_by="tpu-name" if coscheduled else None,
                band=draw(pending_bands),
                user=draw(st.sampled_from(USERS)),
            )
        )
    users = {u: UserAccount(u, draw(st.sampled_from([-1.0, 0.0, 10.0, 10.0]))) for u in USERS}
    headroom = []
    if draw(st.booleans()):
        new_hosts = tuple(
            WorkerSnapshot(f"new-w{i}", TPU_HOST, {"tpu-name": "new", "tpu-worker-id": i}, TPU_HOST)
            for i in range(draw(st.integers(1, 4)))
        )
        headroom.append(GroupHeadroom("g", new_hosts, draw(st.integers(0, 1))))
    share = ShareSnapshot(now=NOW, users=users, running=runs, headroom=headroom)
    return workers, jobs, share


def _checked(cluster: Cluster) -> SchedulingResult:
    workers, jobs, share = cluster
    return find_assignments(workers, jobs, share=share)


@settings(max_examples=200, deadline=None)
@given(shared_clusters())
def test_a_gang_is_evicted_whole_or_not_at_all(cluster: Cluster) -> None:
    """A coscheduled victim loses every running task or none; a plain victim only tasks it runs."""
    result = _checked(cluster)
    by_id = {r.job_id: r for r in cluster[2].running}
    evicted: dict[str, set[int]] = defaultdict(set)
    for eviction in result.evictions:
        assert not evicted[eviction.job_id] & set(eviction.task_indices)  # never evicted twice
        evicted[eviction.job_id] |= set(eviction.task_indices)
    for job_id, indices in evicted.items():
        victim = by_id[job_id]
        running = {t.task_index for t in victim.tasks}
        assert indices <= running
        if victim.coscheduled:
            assert running == indices


@settings(max_examples=200, deadline=None)
@given(shared_clusters())
def test_victims_are_strictly_lower_and_never_production(cluster: Cluster) -> None:
    """Every victim's band ranks strictly below its preemptor's effective band, and is never production."""
    result = _checked(cluster)
    by_id = {r.job_id: r for r in cluster[2].running}
    for eviction in result.evictions:
        assert Band.PRODUCTION != by_id[eviction.job_id].band
        assert by_id[eviction.job_id].band == eviction.band
        assert BAND_RANK[eviction.band] < BAND_RANK[result.effective_bands[eviction.preemptor]]


@settings(max_examples=200, deadline=None)
@given(shared_clusters())
def test_no_eviction_unless_the_preemptor_is_placed_in_the_same_plan(cluster: Cluster) -> None:
    """A preemptor has assignments in the plan (a gang: all its tasks), and a reason naming its victims."""
    _, jobs, _ = cluster
    result = _checked(cluster)
    by_job = {j.job_id: j for j in jobs}
    for eviction in result.evictions:
        mine = [a for a in result.assignments if a.job_id == eviction.preemptor]
        assert mine
        preemptor = by_job[eviction.preemptor]
        if preemptor.group_by:
            assert len(preemptor.task_indices) == len(mine)
        assert f"of {eviction.job_id}" in result.pending_reasons[eviction.preemptor]


@settings(max_examples=200, deadline=None)
@given(shared_clusters())
def test_plans_fit_now_and_after_the_victims_stop(cluster: Cluster) -> None:
    """What starts now fits in free capacity; preemptors fit in free plus what their victims release."""
    workers, jobs, share = cluster
    result = _checked(cluster)
    request = {j.job_id: j.request for j in jobs}
    preemptors = {e.preemptor for e in result.evictions}
    freed: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    by_run = {r.job_id: r for r in share.running}
    for e in result.evictions:
        victim = by_run[e.job_id]
        for task in victim.tasks:
            if task.task_index in e.task_indices:
                f = freed[task.worker_id]
                for d, v in enumerate(_vector(victim.request)):
                    f[d] += v
    now: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    later: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    seen = set()
    for a in result.assignments:
        assert (a.job_id, a.task_index) not in seen
        seen.add((a.job_id, a.task_index))
        target = later if a.job_id in preemptors else now
        for d, v in enumerate(_vector(request[a.job_id])):
            target[a.worker_id][d] += v
    for w in workers:
        free = _vector(w.free)
        for d in range(4):
            from_free = max(0, later[w.worker_id][d] - freed[w.worker_id][d])
            assert now[w.worker_id][d] + from_free <= free[d]


def _vector(r: Resources) -> list[int]:
    return [r.cpu_millis, r.memory_bytes, r.gpus, r.tpus]


@settings(max_examples=60, deadline=None)
@given(
    users=st.integers(2, 5),
    slots=st.integers(1, 3),
    max_usage=st.integers(0, 12),
    data=st.data(),
)
def test_fair_share_never_starves_a_user(users: int, slots: int, max_usage: int, data: st.DataObject) -> None:
    """Each user's oldest job is placed within a bounded number of passes while capacity frees every pass.

    Model of the workflows: every pass is an hour; tasks placed in a pass run for that hour, are charged
    exactly once through the ledger (1 credit each) and release their worker. Users start with any usage in
    [0, max_usage] and each submits a 40-job sweep, one after the other, in one band (FIFO alone would make
    the last user wait for every earlier sweep). Before a user is served, any other user can be served at
    most max_usage + 1 times (each task adds one credit to their share, decay keeps the order), so every
    user is served within (users - 1) * (max_usage + 2) / slots + 1 passes.
    """
    names = [f"u{i}" for i in range(users)]
    start = {n: data.draw(st.integers(0, max_usage), label=f"usage {n}") for n in names}
    accounts = Accounts(
        users={n: UserAccount(n, 1e6, usage=DecayedUsage(float(start[n]), 0.0)) for n in names},
        default_credits=1e6,
    )
    order = data.draw(st.permutations(names), label="submission order")  # each user submits a 40-job sweep
    queue = [PendingJob(f"{n}/{k}", (0,), Resources(1000), user=n) for n in order for k in range(40)]
    oldest = {n: next(j.job_id for j in queue if j.user == n) for n in names}
    bound = math.ceil((users - 1) * (max_usage + 2) / slots) + 1
    fleet = [WorkerSnapshot("w", Resources(slots * 1000), {}, Resources(slots * 1000))]
    served: dict[str, int] = {}
    hour = 3600.0
    for step in range(bound):
        now = step * hour
        share = ShareSnapshot(now=now, users=accounts.users, default_credits=1e6)
        result = find_assignments(fleet, queue, share=share)
        assert slots == len(result.assignments)
        done = {a.job_id for a in result.assignments}
        for job_id in done:
            served.setdefault(job_id.split("/")[0], step)
        charges = [
            Charge(j.user, f"{j.job_id}/task-0", 1, j.request, now, now + hour) for j in queue if j.job_id in done
        ]
        accounts, spent = charge_all(accounts, charges)
        assert float(slots) == spent
        queue = [j for j in queue if j.job_id not in done]
    for name in names:
        assert name in served, f"{name} (usage {start[name]}) not served in {bound} passes"
        assert oldest[name] not in {j.job_id for j in queue}


@settings(max_examples=10, deadline=None)
@given(st.integers(40, 300), st.integers(0, 2000), st.integers(0, 10**6), st.integers(1, 12))
def test_shared_bench_outputs_pass_the_validator(workers: int, tasks: int, seed: int, users: int) -> None:
    """On generated inputs with users, bands and running work, the plan passes every bench check."""
    from benchmarks.scheduler_bench.gen import add_sharing, generate
    from benchmarks.scheduler_bench.validate import validate
    from scheduler.bench import output_document, schedule_shared

    doc = add_sharing(generate(workers, tasks, seed), users, seed)
    assignments, evictions, seconds = schedule_shared(doc, sharing=True)
    assert [] == validate(doc, output_document(assignments, seconds, evictions))


def test_the_validator_catches_half_a_gang_evicted_and_an_equal_band_victim() -> None:
    """Evicting one task of a running gang, or an interactive job for an interactive one, is reported."""
    from benchmarks.scheduler_bench.validate import validate

    doc = {
        "workers": [{"id": f"w{i}", "cpu": 8, "memory_bytes": GIB, "tpus": 4, "attributes": {"tpu-name": "s"}}
                    for i in range(2)],
        "jobs": [{"id": "p", "replicas": 1, "cpu": 1, "memory_bytes": 0, "tpus": 4, "priority": "interactive",
                  "user": "ana", "coschedule_group_by": None}],
        "default_credits": 10,
        "running": [{"id": "r", "priority": "interactive", "cpu": 1, "memory_bytes": 0, "tpus": 4,
                     "coscheduled": True,
                     "tasks": [{"task_index": 0, "worker": "w0"}, {"task_index": 1, "worker": "w1"}]}],
    }
    out = {"seconds": 0.0, "assignments": [{"job": "p", "task_index": 0, "worker": "w0"}],
           "evictions": [{"job": "r", "task_indices": [0], "preemptor": "p"}]}
    errors = validate(doc, out)
    assert any("1 of 2 tasks evicted" in e for e in errors)
    assert any("interactive job r evicted for interactive job p" in e for e in errors)


def test_a_spec_input_without_sharing_fields_runs_and_writes_as_before() -> None:
    """An input in the spec's format runs without a ShareSnapshot; its output has no evictions key."""
    from benchmarks.scheduler_bench.gen import generate
    from scheduler.bench import output_document, parse_jobs, parse_workers, schedule_shared, uses_sharing

    doc = generate(200, 1500, 3)
    assert not uses_sharing(doc)
    assignments, evictions, seconds = schedule_shared(doc, sharing=False)
    assert [] == evictions
    assert {"assignments", "seconds"} == set(output_document(assignments, seconds))
    assert list(find_assignments(parse_workers(doc), parse_jobs(doc)).assignments) == assignments
