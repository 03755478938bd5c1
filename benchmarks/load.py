"""`python -m benchmarks polling` and `python -m benchmarks fanout`: the read path under users, and one huge job.

polling: `--users` clients, each submitting `--jobs-per-user` one-task jobs and waiting on
them one after another (with progress, as `iris run` does) while listing its jobs every few
seconds. (All 2,000 waits at once would meet the server's cap on concurrent long polls per
namespace, ~1,200 on the dev server; `wait` then falls back to describe, see the client.)
Every Temporal call the clients make is counted by a client interceptor, so the report says
how many queries reached workflows (the target is none from list and wait) next to jobs/s.

fanout: one job of `--replicas` tasks of `true` (past Temporal's 2,000 pending children per
workflow, so it runs in waves), reporting tasks/s and the job's history length.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import (
    DescribeWorkflowInput,
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    QueryWorkflowInput,
)
from temporalio.service import RPCError

from benchmarks.history import count_histories
from benchmarks.iris_jobs import THROUGHPUT_COMMAND, _resources, bench_config
from iris.client import AsyncIrisClient
from iris.connection import connect_client
from iris.local_cluster import ClusterInfo, LocalCluster
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
    """One job of `replicas` tasks of `true`: tasks/s from submit to SUCCEEDED, and its history's size."""
    iris = await AsyncIrisClient.connect(info.address, store=info.store_url)
    t0 = time.perf_counter()
    resources = ResourceSpec(cpu=_resources().cpu, memory=_resources().memory, replicas=replicas)
    job_id = await iris.submit_command(THROUGHPUT_COMMAND, resources=resources, name=f"fanout-{replicas}")
    status = await iris.wait(job_id, timeout=6 * 3600)
    elapsed = time.perf_counter() - t0
    tasks, events = await count_histories(iris.temporal, {"job": [job_id]})
    await asyncio.sleep(1)  # visibility trails the histories by a few milliseconds
    runs = [
        len((await iris.temporal.get_workflow_handle(job_id, run_id=wf.run_id).fetch_history()).events)
        async for wf in iris.temporal.list_workflows(f"WorkflowId='{job_id}'")
    ]
    return {
        "replicas": replicas,
        "state": str(status.state),
        "counts": status.task_state_counts,
        "elapsed_s": elapsed,
        "tasks_per_s": replicas / elapsed,
        "job_workflow_tasks": tasks.get("job", 0),
        "job_history_events": events.get("job", 0),
        "job_runs": len(runs),
        "job_largest_run_events": max(runs, default=0),
    }


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
    return "\n".join([
        f"fan-out: one job of {r['replicas']} tasks ended {r['state']} {r['counts']} in {r['elapsed_s']:.1f} s",
        f"  tasks/s: {r['tasks_per_s']:.1f}",
        f"  the job's history: {r['job_history_events']} events, {r['job_workflow_tasks']} workflow tasks, "
        f"in {r['job_runs']} runs (continue-as-new)",
        f"  the largest run: {r['job_largest_run_events']} events (Temporal's limit: 51,200 per run)",
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
