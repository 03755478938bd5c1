"""`python -m benchmarks polling` and `python -m benchmarks fanout`: the read path under users, and one huge job.

polling: `--users` clients, each submitting `--jobs-per-user` one-task jobs and waiting on
them one after another (with progress, as `iris run` does) while listing its jobs every few
seconds. (All 2,000 waits at once would meet the server's cap on concurrent long polls per
namespace, ~1,200 on the dev server; `wait` then falls back to describe, see the client.)
Every Temporal call the clients make is counted by a client interceptor, so the report says
how many queries reached workflows (the target is none from list and wait) next to jobs/s.

fanout: one job of `--replicas` tasks of `true` (past Temporal's 2,000 pending children per
workflow, so it runs in waves, and continues as new), reporting tasks/s, events per task, the longest
workflow task of the job's workflow and its largest payload, and how long `status()` takes to read
every task's row.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    QueryWorkflowInput,
)
from temporalio.service import RPCError

from benchmarks.history import event_seconds
from benchmarks.iris_jobs import THROUGHPUT_COMMAND, _resources, bench_config
from benchmarks.scale import _payload_sizes
from iris.client.async_client import AsyncIrisClient
from iris.connection import connect_client
from iris.local.cluster import ClusterInfo, LocalCluster
from iris.types import JobState, ResourceSpec

CLIENT_CONNECTIONS = 4
"""Temporal connections the simulated users share (a user is an AsyncIrisClient; 100 gRPC channels would
measure this machine's sockets, not Iris)."""
LIST_EVERY_SECONDS = 5.0
PROGRESS_EVERY_SECONDS = 1.0


class CallCounter(Interceptor):
    """Counts the client's calls by kind: queries reach a workflow; the rest are served by the server alone."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        calls = self.calls

        class Counting(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                calls[f"query {input.query}"] += 1
                return await super().query_workflow(input)

            async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
                calls["describe"] += 1
                return await super().describe_workflow(input)

            def list_workflows(self, input: ListWorkflowsInput) -> Any:
                calls["list"] += 1
                return super().list_workflows(input)

            def fetch_workflow_history_events(self, input: FetchWorkflowHistoryEventsInput) -> Any:
                calls["history long-poll"] += 1
                return super().fetch_workflow_history_events(input)

        return Counting(next)


async def polling_load(info: ClusterInfo, users: int, per_user: int) -> dict[str, Any]:
    """`users` clients each submit `per_user` jobs and wait on them all, listing theirs now and then."""
    counter = CallCounter()
    temporals = [
        await connect_client(info.address, interceptors=[counter]) for _ in range(min(users, CLIENT_CONNECTIONS))
    ]
    clients = [AsyncIrisClient(temporals[u % len(temporals)], info.store_url) for u in range(users)]
    finished: list[str] = []

    async def user(u: int) -> None:
        iris = clients[u]
        name = f"poll-u{u}"
        ids = [
            await iris.submit_command(THROUGHPUT_COMMAND, resources=_resources(), name=name) for _ in range(per_user)
        ]

        async def wait_all() -> None:  # one after another, as a script waiting on its jobs does
            for j in ids:
                status = await iris.wait(j, timeout=3600, poll=PROGRESS_EVERY_SECONDS, on_progress=lambda _: None)
                if status.state != JobState.SUCCEEDED:
                    raise RuntimeError(f"bench job {status.job_id} ended {status.state}: {status.error}")
                finished.append(status.job_id)

        waiting = asyncio.ensure_future(wait_all())
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=LIST_EVERY_SECONDS)
            try:
                await iris.list_jobs(limit=per_user, name=name)
            except RPCError as err:  # an overloaded server: counted and reported, not fatal to the load
                counter.calls[f"list failed ({err.message})"] += 1
        waiting.result()

    t0 = time.perf_counter()
    await asyncio.gather(*(user(u) for u in range(users)))
    elapsed = time.perf_counter() - t0
    calls = dict(counter.calls)
    queries = sum(n for kind, n in calls.items() if kind.startswith("query"))
    return {
        "users": users,
        "jobs_per_user": per_user,
        "jobs": len(finished),
        "elapsed_s": elapsed,
        "jobs_per_s": len(finished) / elapsed,
        "workflow_queries": queries,
        "workflow_queries_per_s": queries / elapsed,
        "calls": calls,
        "calls_per_s": {kind: n / elapsed for kind, n in calls.items()},
    }


async def fanout(info: ClusterInfo, replicas: int) -> dict[str, Any]:
    """One job of `replicas` tasks of `true`: tasks/s from submit to SUCCEEDED, and its histories' cost."""
    iris = await AsyncIrisClient.connect(info.address, store=info.store_url)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    resources = ResourceSpec(cpu=_resources().cpu, memory=_resources().memory, replicas=replicas)
    job_id = await iris.submit_command(THROUGHPUT_COMMAND, resources=resources, name=f"fanout-{replicas}")
    status = await iris.wait(job_id, timeout=6 * 3600)
    elapsed = time.perf_counter() - t0
    load_after = os.getloadavg()
    iris._results.clear()  # read it again from the job: its summary, then its rows by range
    t1 = time.perf_counter()
    whole = await iris.status(job_id)
    status_s = time.perf_counter() - t1
    runs = await job_runs(iris.temporal, job_id)
    events = sum(r.events for r in runs)
    longest = max(runs, key=lambda r: r.longest_task_s, default=RunFigures())
    failed = [t for t in whole.tasks if t.state not in (JobState.PENDING, "SUCCEEDED", "KILLED")]
    return {
        "replicas": replicas,
        "state": str(status.state),
        "error": status.error,
        "failed_tasks": [f"{t.task_index} {t.state} on {t.worker_id} exit {t.exit_code}: {t.error}"
                         for t in failed[:5]],
        "counts": status.task_state_counts,
        "elapsed_s": elapsed,
        "tasks_per_s": replicas / elapsed,
        "job_workflow_tasks": sum(r.workflow_tasks for r in runs),
        "job_history_events": events,
        "events_per_task": events / replicas,
        "job_runs": len(runs),
        "job_largest_run_events": max((r.events for r in runs), default=0),
        "longest_workflow_task_s": longest.longest_task_s,
        "longest_workflow_task_at": longest.longest_task_at,
        "largest_payload_bytes": max((r.largest_payload for r in runs), default=0),
        "status_rows": len(whole.tasks),
        "status_read_s": status_s,
        "load_average_before": load_before,
        "load_average_after": load_after,
    }


@dataclass
class RunFigures:
    """One run of the job's workflow, from its history."""

    run_id: str = ""
    events: int = 0
    workflow_tasks: int = 0
    longest_task_s: float = 0.0  # workflow task started -> completed, server times
    longest_task_at: str = ""
    largest_payload: int = 0


async def job_runs(client: Client, job_id: str) -> list[RunFigures]:
    """Every run of `job_id`, newest first, following continue-as-new back from the latest."""
    out: list[RunFigures] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(job_id, run_id=run_id).fetch_history()
        run = RunFigures(run_id=history.run_id)
        started: dict[int, float] = {}
        previous = ""
        for event in history.events:
            run.events += 1
            run.largest_payload = max([run.largest_payload, *_payload_sizes(event)])
            at = event_seconds(event)
            if event.event_id == 1:
                previous = event.workflow_execution_started_event_attributes.continued_execution_run_id
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started[event.event_id] = at
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                run.workflow_tasks += 1
                began = started.pop(event.workflow_task_completed_event_attributes.started_event_id, None)
                if began is not None and at - began > run.longest_task_s:
                    run.longest_task_s = at - began
                    run.longest_task_at = f"run {history.run_id[:8]} event {event.event_id}"
        out.append(run)
        if not previous:
            return out
        run_id = previous


def format_polling(r: dict[str, Any]) -> str:
    calls = ", ".join(f"{k} {v:.1f}/s" for k, v in sorted(r["calls_per_s"].items()))
    return "\n".join([
        f"polling load: {r['users']} users x {r['jobs_per_user']} jobs = {r['jobs']} jobs in {r['elapsed_s']:.1f} s",
        f"  jobs/s: {r['jobs_per_s']:.1f}",
        f"  queries that reached a workflow: {r['workflow_queries']} ({r['workflow_queries_per_s']:.2f}/s)",
        f"  client calls: {calls}",
        f"target: no workflow query from list/wait: {'MET' if r['workflow_queries'] == 0 else 'MISSED'}",
    ])


def format_fanout(r: dict[str, Any]) -> str:
    load = "/".join(f"{x:.1f}" for x in r["load_average_before"])
    return "\n".join([
        f"fan-out: one job of {r['replicas']} tasks ended {r['state']} {r['counts']} in {r['elapsed_s']:.1f} s",
        *([f"  error: {r['error']}", *(f"    task {t}" for t in r["failed_tasks"])] if r["error"] else []),
        f"  tasks/s: {r['tasks_per_s']:.1f}",
        f"  events per task: {r['events_per_task']:.2f} ({r['job_history_events']} events, "
        f"{r['job_workflow_tasks']} workflow tasks, in {r['job_runs']} runs)",
        f"  the largest run: {r['job_largest_run_events']} events (Temporal's limit: 51,200 per run)",
        f"  longest workflow task of the job: {r['longest_workflow_task_s'] * 1000:.0f} ms "
        f"({r['longest_workflow_task_at']}); largest payload {r['largest_payload_bytes'] / 1024:.0f} KiB",
        f"  status(): {r['status_rows']} task rows read in {r['status_read_s']:.2f} s",
        f"  load average 1/5/15 min at submit: {load}",
    ])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="bench", required=True)
    polling = sub.add_parser("polling", help="users polling their jobs while the jobs run")
    polling.add_argument("--users", type=int, default=100)
    polling.add_argument("--jobs-per-user", type=int, default=20)
    out = sub.add_parser("fanout", help="one job with many tasks")
    out.add_argument("--replicas", type=int, default=10_000)
    for p in (polling, out):
        p.add_argument("--home", type=Path, default=None, help="cluster home (default: a temporary directory)")
        p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the figures here")
    args = parser.parse_args(argv)
    for name in ("users", "jobs_per_user", "replicas"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: Sequence[str]) -> int:
    """Start a local cluster with the bench fleet, run one bench, print (and write `--json`), stop the cluster."""
    from benchmarks.session import quiet_logging, sigterm_as_interrupt, stop_cluster

    args = parse_args(argv)
    quiet_logging()
    created = args.home is None
    home = Path(tempfile.mkdtemp(prefix="iris-bench-")) if created else args.home.expanduser().resolve()
    cluster = LocalCluster(home)
    run: Callable[[ClusterInfo], Coroutine[Any, Any, dict[str, Any]]]
    if args.bench == "polling":
        def run(info: ClusterInfo) -> Coroutine[Any, Any, dict[str, Any]]:
            return polling_load(info, args.users, args.jobs_per_user)
        show = format_polling
    else:
        def run(info: ClusterInfo) -> Coroutine[Any, Any, dict[str, Any]]:
            return fanout(info, args.replicas)
        show = format_fanout
    try:
        with sigterm_as_interrupt():
            print(f"starting a local cluster in {home} ...", file=sys.stderr, flush=True)
            info = cluster.up(bench_config())
            result = asyncio.run(run(info))
    except KeyboardInterrupt:
        print("interrupted; stopping the cluster", file=sys.stderr)
        return 130
    finally:
        stop_cluster(cluster, home, created)
    print(show(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
