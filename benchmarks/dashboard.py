"""`python -m benchmarks dashboard`: each dashboard page's server time at fleet scale.

The scale bench's fleet (synthetic agents registering `--workers` hosts with the real scheduler in
its own controller process, see `benchmarks.scale`) with `--pending` tasks that cannot be placed
(they ask for a pool no worker has, so they stay in the queue with a reason) and `--placed` tasks
that run, so workers have running tasks. `--job-records` job workflows are started (on a queue
nobody polls) with the memo and search attributes a real job publishes, so visibility lists that
many jobs. Then each page is loaded `--loads` times, one after another, from the real aiohttp
application, and its median and p90 are printed: wall time over loopback HTTP, the handler's
time, the median part of it spent waiting for Temporal (its `Server-Timing` header), and the p90 of
the rest (the dashboard's own work: decoding, ordering, rendering). Twice: with
the dashboard's cache off (every load waits for the singletons' answers, the worst a viewer can get)
and with it on (what viewers get: the singletons' state is read at most every 2 s, behind the page).
The target is < 300 ms per page.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path

import aiohttp
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.contracts import (
    JOB_KIND,
    JOB_STATE_ATTRIBUTE,
    JOB_TASKS_ATTRIBUTE,
    JOB_USER_ATTRIBUTE,
    KIND_ATTRIBUTE,
    SCHEDULER_WORKFLOW_ID,
    WorkerSessionInput,
)
from activities.signals import coalescer
from benchmarks.scale import (
    AGENT_QUEUE,
    SyntheticAgents,
    _gather_limited,
    _stop,
    _summary,
    host_metadata,
    start_bench_controller,
)
from iris.dashboard import Dashboard, DashboardServer, TemporalUI
from iris.local.cluster import free_port, temporal_binary, temporal_command
from iris.local.processes import port_open
from worker_agent.registration import register_hosts
from workflows.messages import ConstraintSpec, Enqueue, SchedulingSpec
from workflows.visibility import JobView

TARGET_MS = 300.0
NOBODY_QUEUE = "iris-bench-nobody"  # the job records' first workflow task waits here forever
USERS = ("ana", "bo", "chen", "dara")


@dataclass
class PageFigures:
    page: str
    wall_ms: list[float]
    server_ms: list[float]
    size: int
    failed: int = 0  # loads answered 503: Temporal or the scheduler did not answer in time
    temporal_ms: list[float] = field(default_factory=list)  # of server_ms: waiting for Temporal

    @staticmethod
    def p90(values: list[float]) -> float:
        return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0] if values else 0.0

    def over(self) -> bool:
        return self.failed > 0 or self.p90(self.wall_ms) >= TARGET_MS

    def row(self) -> str:
        wall = statistics.median(self.wall_ms) if self.wall_ms else 0.0
        server = statistics.median(self.server_ms) if self.server_ms else 0.0
        verdict = "OVER" if self.over() else "ok"
        failed = f" ({self.failed} failed)" if self.failed else ""
        temporal = statistics.median(self.temporal_ms) if self.temporal_ms else 0.0
        own = [server - waited for server, waited in zip(self.server_ms, self.temporal_ms, strict=True)]
        return (f"  {self.page:<38} {wall:8.1f} {self.p90(self.wall_ms):8.1f}   {server:8.1f} "
                f"{self.p90(self.server_ms):8.1f} {temporal:9.1f} {self.p90(own):8.1f} {self.size / 1024:6.0f}  "
                f"{verdict}{failed}")  # fmt: skip


async def build_fleet(client: Client, workers: int, pending: int, placed: int, hosts_per_agent: int) -> None:
    """Register the synthetic hosts, queue `pending` unplaceable and `placed` placeable tasks (10 per job)."""
    sessions = [
        WorkerSessionInput(
            f"bench-{start:05d}", f"bench-session-{start}", announced=True,
            more_worker_ids=[f"bench-{i:05d}" for i in range(start + 1, min(workers, start + hosts_per_agent))],
            task_queue=AGENT_QUEUE,
        )
        for start in range(0, workers, hosts_per_agent)
    ]  # fmt: skip

    async def register(session: WorkerSessionInput) -> dict[str, str]:
        first = int(session.worker_id.split("-")[1])
        hosts = [host_metadata(first + i, session.session) for i in range(1 + len(session.more_worker_ids))]
        answer = await register_hosts(client, session, hosts, timeout=300)
        assert answer is not None, "register_hosts returns None only when told to stop"
        return answer

    await _gather_limited([register(s) for s in sessions])
    while (await _summary(client)).healthy_workers < workers:  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    stuck = SchedulingSpec(cpu_millis=500, memory_bytes=1 << 30, constraints=[ConstraintSpec("pool", "EQ", "gpu")])
    fits = SchedulingSpec(cpu_millis=500, memory_bytes=1 << 30)
    jobs = [(f"bench-job-{j:06d}", stuck) for j in range(pending // 10)]
    jobs += [(f"bench-run-{j:06d}", fits) for j in range(placed // 10)]

    async def enqueue(job_id: str, spec: SchedulingSpec) -> None:
        request = Enqueue(job_id, spec, dict.fromkeys(range(10), 0), time.time())
        for pause in (0.2, 0.5, 1.0, 2.0, *[5.0] * 60):
            try:
                await coalescer(client, SCHEDULER_WORKFLOW_ID).send(request)
                return
            except RPCError:
                await asyncio.sleep(pause)

    await _gather_limited([enqueue(job_id, spec) for job_id, spec in jobs], limit=64)
    while True:
        summary = await _summary(client)
        if summary.pending_tasks >= pending and summary.running_tasks >= placed:
            return
        await asyncio.sleep(1.0)


async def start_job_records(client: Client, count: int) -> None:
    """`count` job workflows as visibility shows jobs: the pending bench jobs first, then finished-looking ones."""
    keys = {
        "kind": SearchAttributeKey.for_keyword(KIND_ATTRIBUTE),
        "state": SearchAttributeKey.for_keyword(JOB_STATE_ATTRIBUTE),
        "user": SearchAttributeKey.for_keyword(JOB_USER_ATTRIBUTE),
    }
    tasks_key = SearchAttributeKey.for_int(JOB_TASKS_ATTRIBUTE)

    async def start(j: int) -> None:
        user = USERS[j % len(USERS)]
        view = JobView(state="PENDING", counts={"PENDING": 10}, num_tasks=10, submitted_at=time.time(),
                       pending_reason="0/10000 workers: 10000 lack pool=gpu")  # fmt: skip
        attrs = TypedSearchAttributes([
            SearchAttributePair(keys["kind"], JOB_KIND), SearchAttributePair(keys["state"], "PENDING"),
            SearchAttributePair(keys["user"], user), SearchAttributePair(tasks_key, 10),
        ])  # fmt: skip
        await client.start_workflow("JobWorkflow", id=f"bench-job-{j:06d}", task_queue=NOBODY_QUEUE,
                                    memo=view.to_memo(), search_attributes=attrs)  # fmt: skip

    await _gather_limited([start(j) for j in range(count)], limit=32)


async def measure(base: str, pages: Sequence[str], loads: int, pause: float = 0.0) -> list[PageFigures]:
    """Each page `loads` times in a row, `pause` s apart; a 503 (Temporal did not answer) counts as failed."""
    out = []
    async with aiohttp.ClientSession() as http:
        for page in pages:
            figures = PageFigures(page, [], [], 0)
            for _ in range(loads):
                await asyncio.sleep(pause)
                started = time.perf_counter()
                async with http.get(base + page) as response:
                    body = await response.read()
                elapsed = (time.perf_counter() - started) * 1000
                if response.status == 503:
                    figures.failed += 1
                    continue
                if response.status != 200:
                    raise RuntimeError(f"{page}: HTTP {response.status}: {body[:300]!r}")
                figures.wall_ms.append(elapsed)
                timing = dict(part.strip().split(";dur=") for part in response.headers["Server-Timing"].split(","))
                figures.server_ms.append(float(timing["total"]))
                figures.temporal_ms.append(float(timing["temporal"]))
                figures.size = len(body)
            out.append(figures)
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=10_000, help="synthetic worker hosts (default 10000)")
    parser.add_argument("--pending", type=int, default=100_000, help="unplaceable queued tasks (default 100000)")
    parser.add_argument("--placed", type=int, default=20_000, help="running tasks (default 20000)")
    parser.add_argument("--job-records", type=int, default=2_000, help="job workflows in visibility (2000)")
    parser.add_argument("--hosts-per-agent", type=int, default=100, help="hosts per liveness session (100)")
    parser.add_argument("--loads", type=int, default=20, help="loads of each page (default 20)")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds between loads (default 0); e.g. 0.25 spreads a page's loads over the "
                             "dashboard's 2 s refreshes, so loads beside a refresh are measured too")  # fmt: skip
    args = parser.parse_args(argv)
    if args.placed > args.workers * 16:
        parser.error("--placed: at most 16 tasks fit a synthetic worker")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="iris-dashboard-bench-"))
    port, ui_port = free_port(), free_port()
    server = subprocess.Popen(
        temporal_command(binary=temporal_binary(), port=port, ui_port=ui_port, db_path=home / "temporal.db"),
        stdout=(home / "temporal.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    controller: subprocess.Popen[bytes] | None = None
    try:
        while not port_open(port):
            if server.poll() is not None:
                print(f"error: the dev server did not start; see {home / 'temporal.log'}", file=sys.stderr)
                return 2
            time.sleep(0.2)
        address = f"127.0.0.1:{port}"
        controller = start_bench_controller(address, home)
        if controller is None:
            return 2
        out = controller.stdout
        assert out is not None
        threading.Thread(target=lambda: sum(1 for _ in out), daemon=True).start()  # later log lines: no full pipe

        waits: list[str] = []

        async def go() -> dict[str, list[PageFigures]]:
            client = await Client.connect(address)
            agents = SyntheticAgents()
            sessions = -(-args.workers // args.hosts_per_agent)
            async with Worker(client, task_queue=AGENT_QUEUE, activities=[agents.worker_session],
                              max_concurrent_activities=sessions + 10):  # fmt: skip
                started = time.monotonic()
                await build_fleet(client, args.workers, args.pending, args.placed, args.hosts_per_agent)
                print(f"fleet: {args.workers} workers, {args.pending} pending and {args.placed} placed tasks "
                      f"in {time.monotonic() - started:.0f} s", file=sys.stderr)  # fmt: skip
                started = time.monotonic()
                await start_job_records(client, args.job_records)
                print(f"{args.job_records} job records in {time.monotonic() - started:.0f} s", file=sys.stderr)
                await _summary(client)  # the scheduler answers again after the burst of starts
                last_queue_page = -(-args.pending // 10 // 50)
                last_worker_page = -(-args.workers // 50)
                pages = [
                    "/actions", "/actions?user=ana", "/queue", f"/queue?page={last_queue_page}",
                    "/queue?job=bench-job-00009", "/jobs", "/jobs?state=PENDING&user=bo",
                    "/jobs?job=bench-job-00005", "/workers", f"/workers?page={last_worker_page}",
                    "/workers?state=busy", "/workers?attr=zone%3Dzone-3&page=2",
                    f"/workers/bench-{args.workers // 2:05d}", "/fleet", "/users", "/reservations",
                ]  # fmt: skip
                out = {}
                measured_from = time.time()
                for label, cache in (("no cache", 0.0), ("the dashboard's 2 s cache", 2.0)):
                    dashboard = Dashboard(client, TemporalUI(f"http://127.0.0.1:{ui_port}"), "memory://bench",
                                          cache_seconds=cache)  # fmt: skip
                    web = DashboardServer(dashboard, 0)
                    await web.start()
                    try:
                        out[label] = await measure(web.url, pages, args.loads, args.pause)
                    finally:
                        await web.stop()
                waits.extend(await scheduler_tasks(client, measured_from))
                return out

        try:
            results = asyncio.run(go())
        except RPCError as err:  # e.g. the scheduler's workflow task keeps failing on an overloaded machine
            print(f"error: Temporal or the scheduler stopped answering: {err.message}; logs kept in {home}",
                  file=sys.stderr)  # fmt: skip
            return 1
    finally:
        if controller is not None:
            _stop(controller)
        _stop(server)
    shutil.rmtree(home, ignore_errors=True)  # kept above when something failed
    for label, figures in results.items():
        print(f"dashboard pages at {args.workers} workers, {args.pending} pending + {args.placed} placed tasks, "
              f"{args.job_records} jobs in visibility; {args.loads} loads each {args.pause:g} s apart, "
              f"{label} (ms):")  # fmt: skip
        print(f"  {'page':<38} {'median':>8} {'p90':>8}   {'server':>8} {'p90':>8} {'temporal':>9} {'own p90':>8} "
              f"{'KiB':>6}")  # fmt: skip
        for f in figures:
            print(f.row())
        over = [f.page for f in figures if f.over()]
        print(f"target < {TARGET_MS:.0f} ms per page: " + ("met" if not over else f"missed by {', '.join(over)}"))
    for line in waits:
        print(line)
    return 0


async def scheduler_tasks(client: Client, since: float) -> list[str]:
    """The scheduler's workflow tasks while pages loaded: a query waits for the one in flight to end."""
    runs = [wf async for wf in client.list_workflows(f"WorkflowId = '{SCHEDULER_WORKFLOW_ID}'")]
    started_runs = sum(1 for wf in runs if wf.start_time.timestamp() >= since)
    current = max(runs, key=lambda wf: wf.start_time)
    history = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID, run_id=current.run_id).fetch_history()
    started: dict[int, float] = {}
    took: list[float] = []
    for event in history.events:
        at = event.event_time.ToDatetime(tzinfo=UTC).timestamp()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started[event.event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            begun = started.get(event.workflow_task_completed_event_attributes.started_event_id, 0.0)
            if begun >= since:
                took.append((at - begun) * 1000)
    if not took:
        return [f"scheduler: {started_runs} runs started while measuring (continue-as-new); no workflow task timed"]
    busy = sum(took) / 1000 / max(1e-9, time.time() - max(since, current.start_time.timestamp()))
    return [f"scheduler workflow tasks while measuring (its last run, {len(took)} tasks): median "
            f"{statistics.median(took):.0f} ms, p90 {PageFigures.p90(took):.0f} ms, max {max(took):.0f} ms, "
            f"busy {busy:.0%} of the time; {started_runs} runs started (continue-as-new). A query to the "
            f"scheduler waits for the task in flight."]  # fmt: skip
