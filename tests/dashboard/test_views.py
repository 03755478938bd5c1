"""The dashboard's pure parts: the actions merge, filters, pages, trees, pictures and links."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import share_from_pb, snapshot_from_pb
from iris.dashboard.actions import Action, ActionFilter, Scan, merge, visibility_time
from iris.dashboard.charts import DepthHistory, Usage, capacity_bars, depth_line
from iris.dashboard.depth import DepthStore
from iris.dashboard.links import TemporalUI, default_ui_url
from iris.dashboard.reads import JobRow, Snapshot, decode_token, encode_token
from iris.dashboard.views import (
    WorkerFilter,
    as_tree,
    duration,
    group_usage,
    paginate,
    parse_page,
    task_counts,
)
from scheduler.scheduling import find_assignments
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_dashboard import worker_status, workers_page
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.snapshot_cache import encode_snapshot


def action(at: float, subject: str = "j") -> Action:
    return Action(at, "job submitted", "job", subject, subject)


def test_merge_is_newest_first_across_kinds_and_pages_on() -> None:
    """Events of every kind interleave by time; a full page hands its last time on as the next cursor."""
    jobs = Scan([action(5, "a"), action(3, "b"), action(1, "c")], float("-inf"))
    workers = Scan([action(4, "w"), action(2, "x")], float("-inf"))
    page, cursor = merge([jobs, workers], before=10, limit=3)
    assert ["a", "w", "b"] == [a.subject for a in page]
    assert 3 == cursor
    rest, end = merge([jobs, workers], before=cursor, limit=3)
    assert ["x", "c"] == [a.subject for a in rest]
    assert end is None


def test_merge_stops_where_a_kind_may_miss_events() -> None:
    """Events older than a kind's oldest read close time wait for the next page, which starts there."""
    jobs = Scan([action(9, "a"), action(8, "b"), action(2, "old")], complete_after=7)
    slices = Scan([action(6, "s")], float("-inf"))
    page, cursor = merge([jobs, slices], before=10, limit=10)
    assert ["a", "b"] == [a.subject for a in page]
    assert 7 == cursor


def test_action_filter_narrows_the_kinds_listed() -> None:
    """A job or user filter lists only jobs (the job's children too); a worker filter only its sessions."""
    assert ["job", "worker", "slice"] == [kind for kind, _ in ActionFilter().sources()]
    (kind, query), = ActionFilter(job="train-1").sources()
    assert "job" == kind and "WorkflowId STARTS_WITH 'train-1/'" in query
    (kind, query), = ActionFilter(user="o'hara").sources()
    assert "IrisUser = 'o\\'hara'" in query
    (kind, query), = ActionFilter(worker="cpu-0").sources()
    assert "worker" == kind and "'iris-worker-cpu-0-session-'" in query


def test_visibility_time_is_utc_with_microseconds() -> None:
    assert "'1970-01-01T00:00:01.500000Z'" == visibility_time(1.5)


def test_paginate_clamps_the_page() -> None:
    """Page numbers past either end show the nearest page; an empty list has one empty page."""
    shown = paginate(list(range(120)), 9, 50)
    assert (3, 3, 100, [100, 119]) == (shown.page, shown.pages, shown.start, [shown.rows[0], shown.rows[-1]])
    assert [] == paginate([], 1).rows
    assert 1 == parse_page("x") == parse_page("-4")


def entry(worker_id: str, healthy: bool = True, cordoned: bool = False, **attrs: object) -> WorkerEntry:
    w = WorkerEntry(worker_id, "s", cpu_millis=4000, memory_bytes=1 << 30, gpus=0, tpus=0,
                    attributes={k.replace("_", "-"): v for k, v in attrs.items()}, cordoned=cordoned)  # fmt: skip
    if not healthy:
        w.state = WorkerState.LOST
    return w


def registry(*workers: WorkerEntry, running: dict[str, int] | None = None) -> SchedulerState:
    """A scheduler state holding `workers`, with `running[worker_id]` one-core tasks placed on each."""
    state = SchedulerState()
    for w in workers:
        state.workers[w.worker_id] = w
    for worker_id, n in (running or {}).items():
        for i in range(n):
            key = f"job-{worker_id}/task-{i}"
            state.placements[key] = Placement(f"job-{worker_id}", i, 0, worker_id, 1000, 0, 0, 0)
    return state


def ids(answer: pb.DashboardWorkers) -> list[str]:
    return [w.worker_id for w in answer.workers]


def test_the_scheduler_filters_and_pages_its_workers() -> None:
    """Filters combine; rows come sorted by worker id, lost and cordoned ones included; counts cover everyone."""
    state = registry(entry("b-1", zone="z1"), entry("a-2", zone="z2"), entry("a-1", healthy=False, zone="z1"),
                     entry("c-1", cordoned=True), running={"b-1": 1})  # fmt: skip

    def page(offset: int = 0, limit: int = 50, **flt: str) -> pb.DashboardWorkers:
        return workers_page(state, WorkerFilter(**flt).request(offset, limit))

    everyone = page()
    assert ["a-1", "a-2", "b-1", "c-1"] == ids(everyone)
    assert (4, 2, 1, 1, 1) == (everyone.matched, everyone.healthy, everyone.cordoned, everyone.lost, everyone.busy)
    assert [0, 0, 1, 0] == list(everyone.running_counts)
    assert ["b-1"] == ids(page(state="busy"))
    assert ["a-2", "c-1"] == ids(page(state="idle"))  # alive and running nothing (cordoned or not)
    assert ["c-1"] == ids(page(state="cordoned"))
    assert ["a-1"] == ids(page(text="a", attribute="zone=z1"))
    assert [] == ids(page(attribute="gpu"))
    second = page(offset=2, limit=2)
    assert (["b-1", "c-1"], 4, 2) == (ids(second), second.matched, second.offset)
    counts_only = page(limit=0)
    assert ([], 4) == (ids(counts_only), counts_only.matched)


def test_ten_thousand_workers_are_all_listed_compactly() -> None:
    """At 10,000 workers every one is reachable a page at a time; a row names a few running tasks, its page all."""
    workers = [entry(f"w-{i:05d}", healthy=i % 100 != 7, cordoned=i % 100 == 9) for i in range(10_000)]
    state = registry(*workers, running={"w-00042": 5})
    seen: list[str] = []
    offset = 0
    while True:
        answer = workers_page(state, WorkerFilter().request(offset, 50))
        assert len(answer.workers) <= 50
        seen += ids(answer)
        offset += 50
        if offset >= answer.matched:
            break
    assert sorted(w.worker_id for w in workers) == seen
    lost = workers_page(state, WorkerFilter(state="lost").request(0, 500))
    assert 100 == lost.matched == lost.lost and all(not w.healthy for w in lost.workers)
    row = workers_page(state, WorkerFilter(text="w-00042").request(0, 50))
    assert ([5], 3) == (list(row.running_counts), len(row.workers[0].running_tasks))
    mine = worker_status(state, "w-00042")
    assert (5, 5000) == (len(mine.running_tasks), mine.committed.cpu_millis)
    assert "" == worker_status(state, "nobody").worker_id


def test_capacity_by_group_counts_healthy_workers_only() -> None:
    tpu: dict[str, Any] = {"iris_scale_group": "tpu"}
    state = registry(entry("s-0", **tpu), entry("s-1", **tpu), entry("c-0"), entry("gone", healthy=False, **tpu),
                     running={"s-0": 3, "c-0": 1, "gone": 4})  # fmt: skip
    answer = workers_page(state, WorkerFilter().request(0, 0))
    assert [Usage("other workers", 1, 4), Usage("tpu", 3, 8)] == group_usage(answer)


def test_the_queue_is_in_the_order_the_scheduler_tries_it() -> None:
    """Higher priority first, submission order among equals, as the pass orders it."""
    state = SchedulerState()
    for at, (job_id, priority) in enumerate([("a", 0), ("b", 5), ("c", 0), ("d", 5)]):
        spec = SchedulingSpec(cpu_millis=100, memory_bytes=0, priority=priority)
        state.pending[job_id] = PendingEntry(job_id, spec, {0: 0, 1: 0}, submitted_at=float(at))
    snapshot = Snapshot(encode_snapshot(state, now=10.0))
    assert ["b", "d", "a", "c"] == snapshot.job_ids == [job.job_id for job in snapshot.queue]
    assert [] == Snapshot(b"").queue  # nothing published yet


def test_the_queue_puts_higher_bands_first() -> None:
    """Production, then interactive (also a request without a band), then batch; submission order inside each."""
    state = SchedulerState()
    for at, (job_id, band) in enumerate([("sweep", "batch"), ("notebook", ""), ("serve", "production"),
                                         ("train", "interactive")]):  # fmt: skip
        spec = SchedulingSpec(cpu_millis=100, memory_bytes=0, band=band)
        state.pending[job_id] = PendingEntry(job_id, spec, {0: 0}, submitted_at=float(at))
    assert ["serve", "notebook", "train", "sweep"] == Snapshot(encode_snapshot(state, now=10.0)).job_ids


def test_the_queue_shows_two_users_in_the_fair_share_order_the_pass_uses() -> None:
    """Inside a band the user with the least share goes first, whoever submitted first; the pass agrees.

    ana already runs a task (an hour of it counts toward her share), bo runs nothing: bo's job, submitted
    last, is tried first, and is the one a pass places in the one free core. A user without credits waits
    in batch, after both, and the page says which band the job asked for.
    """
    state = SchedulerState()
    state.workers["w-0"] = WorkerEntry("w-0", "s", cpu_millis=2000, memory_bytes=1 << 30, gpus=0, tpus=0,
                                       attributes={})  # fmt: skip
    state.placements["ana-0/task-0"] = Placement("ana-0", 0, 0, "w-0", 1000, 0, 0, 0, user="ana", band="interactive")
    for at, (job_id, user) in enumerate([("ana-1", "ana"), ("ana-2", "ana"), ("broke-1", "cy"), ("bo-1", "bo")]):
        spec = SchedulingSpec(cpu_millis=1000, memory_bytes=0, user=user)
        state.pending[job_id] = PendingEntry(job_id, spec, {0: 0}, submitted_at=float(at))
    state.books.set_credits("cy", 0)
    data = encode_snapshot(state, now=10.0)
    snapshot = Snapshot(data)
    assert ["bo-1", "ana-1", "ana-2", "broke-1"] == snapshot.job_ids
    assert ["interactive", "interactive", "interactive", "batch"] == [snapshot.band(j) for j in snapshot.queue]
    assert ["bo", "ana", "ana", "cy"] == [job.user for job in snapshot.queue]
    message = pb.SchedulingSnapshot.FromString(compressed.decompress(data))
    workers, jobs = snapshot_from_pb(message)
    plan = find_assignments(workers, jobs, share=share_from_pb(message))
    assert [snapshot.job_ids[0]] == [a.job_id for a in plan.assignments]


def test_a_new_snapshot_is_ordered_again_when_its_users_shares_change() -> None:
    """A re-encoded snapshot with the same queue and shares keeps the order; one where ana's task ended
    (her share drops below bo's) lists her jobs first again."""
    state = SchedulerState()
    state.workers["w-0"] = WorkerEntry("w-0", "s", cpu_millis=4000, memory_bytes=1 << 30, gpus=0, tpus=0,
                                       attributes={})  # fmt: skip
    state.placements["run/task-0"] = Placement("run", 0, 0, "w-0", 1000, 0, 0, 0, user="ana", band="interactive")
    for at, (job_id, user) in enumerate([("ana-1", "ana"), ("bo-1", "bo")]):
        spec = SchedulingSpec(cpu_millis=1000, memory_bytes=0, user=user)
        state.pending[job_id] = PendingEntry(job_id, spec, {0: 0}, submitted_at=float(at))
    first = Snapshot(encode_snapshot(state, now=10.0))
    assert ["bo-1", "ana-1"] == first.job_ids
    again = Snapshot(encode_snapshot(state, now=11.0), first)
    assert ["bo-1", "ana-1"] == again.job_ids
    del state.placements["run/task-0"]
    state.placements["run/task-0"] = Placement("run", 0, 0, "w-0", 1000, 0, 0, 0, user="bo", band="interactive")
    assert ["ana-1", "bo-1"] == Snapshot(encode_snapshot(state, now=12.0), again).job_ids


def test_queue_depth_samples_survive_in_the_store(tmp_path: Path) -> None:
    """Saved samples of the last hour come back before the new ones; an unusable store keeps them in memory."""
    before = DepthHistory()
    for at, depth in [(1_000.0, 5), (5_000.0, 7), (5_005.0, 9)]:
        before.add(depth, at)
    DepthStore(tmp_path.as_uri()).save(before)
    after = DepthHistory()
    after.add(3, 5_010.0)
    assert 2 == DepthStore(str(tmp_path)).load(after, now=5_020.0)  # 1,000 s is more than an hour before
    assert [(5_000.0, 7), (5_005.0, 9), (5_010.0, 3)] == list(after.samples)
    memory = DepthStore("memory://bench")
    memory.save(before)
    assert 0 == memory.load(DepthHistory())


def job_row(job_id: str, parent: str = "") -> JobRow:
    return JobRow(job_id, "", "", "RUNNING", "", parent, 1, {}, "", "", 0.0, 0.0, "RUNNING", 0.0)


def test_jobs_as_trees() -> None:
    """A child follows its parent (by id or by the parent attribute); an orphan stays where it was."""
    rows = [job_row("a/b"), job_row("c"), job_row("a"), job_row("x", parent="c"), job_row("z/y")]
    assert [(0, "c"), (1, "x"), (0, "a"), (1, "a/b"), (0, "z/y")] == [(d, r.job_id) for d, r in as_tree(rows)]


def test_durations_and_counts_read_well() -> None:
    assert "5.2s" == duration(100, 105.2)
    assert "3m 04s" == duration(1, 185)
    assert "2h 00m" == duration(1, 7201)
    assert "" == duration(0, None)
    assert [("RUNNING", 2), ("FAILED", 1)] == task_counts({"FAILED": 1, "RUNNING": 2, "PENDING": 0})


def test_temporal_ui_links() -> None:
    """A workflow link is `<UI>/namespaces/<ns>/workflows/<id>` with the id escaped (job ids hold '/')."""
    ui = TemporalUI("http://127.0.0.1:8233/", "default")
    assert "http://127.0.0.1:8233/namespaces/default/workflows/job%2Ftask-0" == ui.workflow("job/task-0")
    assert "http://127.0.0.1:9233" == default_ui_url("127.0.0.1:8233")
    with pytest.raises(ValueError, match="temporal_ui_url"):
        TemporalUI("127.0.0.1:8233")


def test_page_tokens_survive_a_url_and_garbage_starts_over() -> None:
    assert b"\x00\xffpage" == decode_token(encode_token(b"\x00\xffpage"))
    assert decode_token("%%%") is None


def test_pictures_are_svg_with_their_numbers() -> None:
    bars = capacity_bars([Usage("tpu<v5>", 3, 8)])
    assert bars.startswith("<svg") and "3 / 8 cpu (38%)" in bars and "tpu&lt;v5&gt;" in bars
    line = depth_line([(0.0, 0), (60.0, 40), (120.0, 10)])
    assert "<polyline" in line and ">40<" in line and "now: 10" in line
    assert "" == depth_line([(0.0, 1)])


async def test_cached_reads_serve_the_last_value_while_one_fresh_load_runs() -> None:
    """Many viewers cost one load; a stale value is served at once while it refreshes behind."""
    import asyncio

    from iris.dashboard.reads import Cached

    loads = 0
    gate = asyncio.Event()

    async def load() -> int:
        nonlocal loads
        loads += 1
        if loads > 1:
            await gate.wait()
        return loads

    cached = Cached(load, ttl=0.01)
    assert [1, 1, 1] == await asyncio.gather(cached.get(), cached.get(), cached.get())
    await asyncio.sleep(0.02)
    assert 1 == await cached.get()  # stale, served at once; the refresh waits on the gate
    assert 1 == await cached.get()
    gate.set()
    await asyncio.sleep(0.01)
    assert 2 == await cached.get()
    assert 2 == loads
    every_time = Cached(load, ttl=0.0)
    assert [3, 4] == [await every_time.get(), await every_time.get()]


async def test_cached_none_is_a_value() -> None:
    """No autoscaler (None) is an answer like any other: cached, not asked again at once."""
    from iris.dashboard.reads import Cached

    calls = []

    async def load() -> None:
        calls.append(1)

    cached: Cached[None] = Cached(load, ttl=60)
    assert (await cached.get(), await cached.get()) == (None, None)
    assert 1 == len(calls)


async def test_visibility_answers_are_shared_by_request_and_failures_are_not_kept() -> None:
    """The same listing asked twice within the ttl is one call; a failed call is asked again."""
    from iris.dashboard.reads import KeyedCache

    calls: list[str] = []

    async def load(key: str) -> str:
        calls.append(key)
        if key == "bad" and calls.count("bad") == 1:
            raise RuntimeError("visibility timed out")
        return key.upper()

    cache = KeyedCache(ttl=60)
    assert ("A", "A", "B") == (await cache.get("a", lambda: load("a")), await cache.get("a", lambda: load("a")),
                               await cache.get("b", lambda: load("b")))  # fmt: skip
    with pytest.raises(RuntimeError):
        await cache.get("bad", lambda: load("bad"))
    assert "BAD" == await cache.get("bad", lambda: load("bad"))
    assert ["a", "b", "bad", "bad"] == calls


async def test_a_request_served_a_stale_read_is_marked_so_its_page_asks_again_soon() -> None:
    """A read past its ttl, served at once while the fresh one loads, marks its request stale (the page's next
    refresh comes soon, not a whole period later); a fresh read does not."""
    import asyncio

    from iris.dashboard.reads import WAITED, Cached, Waited

    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        return loads

    cached = Cached(load, ttl=0.05)
    requests = [Waited(), Waited(), Waited()]
    WAITED.set(requests[0])
    assert 1 == await cached.get()  # the first load, waited for
    await asyncio.sleep(0.1)
    WAITED.set(requests[1])
    assert 1 == await cached.get()  # past its ttl: served, the fresh one loads behind
    await asyncio.sleep(0.01)
    WAITED.set(requests[2])
    assert 2 == await cached.get()
    assert [False, True, False] == [r.stale for r in requests]
