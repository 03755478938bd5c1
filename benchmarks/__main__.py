"""The command line: parse the options, start the cluster, measure both sides, report, always stop the cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.baseline import measure_raw
from benchmarks.figures import SETTLE_SECONDS, WARMUP_SAMPLES
from benchmarks.history import job_timeline
from benchmarks.host import machine_info
from benchmarks.iris_jobs import Entry, bench_config, measure_iris
from benchmarks.report import BenchResult, format_report
from benchmarks.session import quiet_logging, sigterm_as_interrupt, stop_cluster
from iris.client.async_client import AsyncIrisClient
from iris.local.cluster import ClusterInfo, LocalCluster


async def run_bench(
    info: ClusterInfo,
    jobs: int,
    samples: int,
    timeline: bool = True,
    dynamic_config: Mapping[str, str] | None = None,
    settle: float = SETTLE_SECONDS,
) -> BenchResult:
    """Measure raw and Iris (commands, then callables) against the running cluster `info` (started with
    `dynamic_config`)."""
    machine = machine_info()
    machine["dynamic_config"] = dict(dynamic_config or {})
    iris = await AsyncIrisClient.connect(info.address, store=info.store_url)
    pids = {"bench": os.getpid(), **info.pids}
    machine["settle_s"] = settle
    raw = await measure_raw(iris.temporal, samples, jobs, pids, settle)
    figures = await measure_iris(iris, samples, jobs, pids, settle)
    callables = await measure_iris(iris, samples, jobs, pids, settle, entry=Entry.CALLABLES)
    machine["loadavg_end"] = list(os.getloadavg())
    result = BenchResult(machine=machine, raw=raw, iris=figures, callables=callables)
    if timeline:
        last = figures.last
        result.timeline = await job_timeline(
            iris.temporal, last.job_id, last.submitted_at, last.running_at, last.done_at
        )
    return result


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Iris latency and throughput vs the bare Temporal dev server, on one local cluster.",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=200,
        help="workflows (raw) and one-task jobs (Iris) started at once (default 200)",
    )
    parser.add_argument(
        "--latency-samples",
        type=int,
        default=20,
        help=f"sequential latency samples per side, after {WARMUP_SAMPLES} warm-ups (default 20)",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="cluster home (default: a temporary directory, removed afterwards)",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the figures here")
    parser.add_argument(
        "--no-timeline",
        action="store_true",
        help="skip the event timeline of one job on the submit-to-running path",
    )
    parser.add_argument(
        "--dynamic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra dev-server dynamic config (JSON value), e.g. history.transferProcessorMaxPollRPS=1000",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=SETTLE_SECONDS,
        metavar="SECONDS",
        help=f"quiet seconds before each throughput run, so none pays for the one before (default {SETTLE_SECONDS:g})",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.latency_samples < 1:
        parser.error("--jobs and --latency-samples must be >= 1")
    if args.settle < 0:
        parser.error(f"--settle must be >= 0, got {args.settle:g}")
    try:
        args.dynamic_config = dict(parse_dynamic_config(item) for item in args.dynamic_config)
    except ValueError as err:
        parser.error(str(err))
    return args


def parse_dynamic_config(item: str) -> tuple[str, str]:
    """`KEY=VALUE` from the command line; VALUE must be JSON (`1000`, `true`, `"text"`)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--dynamic-config: expected KEY=VALUE, got {item!r}")
    try:
        json.loads(value)
    except ValueError:
        raise ValueError(f"--dynamic-config {key}: the value must be JSON, got {value!r}") from None
    return key.strip(), value


def main(argv: Sequence[str] | None = None) -> int:
    """Start the cluster, measure, print (and write `--json`), always stop the cluster; the exit code. SIGTERM is
    Ctrl-C in every bench: each stops the servers, controllers and agents it started (the scale bench's dev server
    and controller outlived a terminated bench)."""
    with sigterm_as_interrupt():
        return _main(sys.argv[1:] if argv is None else list(argv))


def _main(argv: list[str]) -> int:
    if argv[:1] == ["chaos"]:  # faults under a mixed load on a supervised local cluster
        from benchmarks.chaos import main as chaos_main

        return chaos_main(argv[1:])
    if argv[:1] == ["fencing"]:  # frozen and killed agents and controllers: no attempt overlaps, none is lost
        from benchmarks.fencing import main as fencing_main

        return fencing_main(argv[1:])
    if argv[:1] == ["heartbeats"]:  # heartbeat calls a running task costs Temporal, with leases and before
        from benchmarks.heartbeats import main as heartbeats_main

        return heartbeats_main(argv[1:])
    if argv[:1] == ["client-exit"]:  # how often a submit-and-exit script dies at exit, with and without the grace
        from benchmarks.client_exit import main as exit_main

        return exit_main(argv[1:])
    if argv[:1] == ["scale"]:  # the scheduler at fleet scale: its own server and synthetic agents
        from benchmarks.scale import main as scale_main

        return scale_main(argv[1:])
    if argv[:1] == ["snapshot"]:  # the pass's snapshot at fleet scale, as the workflow builds it (no server)
        from benchmarks.snapshot import main as snapshot_main

        return snapshot_main(argv[1:])
    if argv[:1] == ["state-probe"]:  # the scheduler's carried state today vs as protobuf messages (no server)
        from benchmarks.state_probe import main as probe_main

        return probe_main(argv[1:])
    if argv[:1] == ["dashboard"]:  # each dashboard page's server time at the scale bench's fleet size
        from benchmarks.dashboard import main as dashboard_main

        return dashboard_main(argv[1:])
    if argv[:1] == ["autoscaler-idle"]:  # an idle autoscaler's history events per hour, before and after
        from benchmarks.autoscaler_idle import main as idle_main

        return idle_main(argv[1:])
    if argv[:1] == ["trees"]:  # from a parent job's end to its 100 children's processes gone
        from benchmarks.trees import main as trees_main

        return trees_main(argv[1:])
    if argv[:1] == ["preempt"]:  # an interactive gang evicting a batch gang: submit -> its tasks running
        from benchmarks.preempt import main as preempt_main

        return preempt_main(argv[1:])
    if argv[:1] in (["polling"], ["fanout"]):  # the read path under many users; one job of many tasks
        from benchmarks.load import main as load_main

        return load_main(argv)
    args = parse_args(argv)
    quiet_logging()
    created = args.home is None
    home = Path(tempfile.mkdtemp(prefix="iris-bench-")) if created else args.home.expanduser().resolve()
    cluster = LocalCluster(home)
    existing = cluster.status()
    if existing is not None and existing.running:
        print(f"error: a local cluster already runs in {home}; use another --home", file=sys.stderr)
        return 2
    result: BenchResult | None = None
    try:
        started = time.monotonic()
        print(f"starting a local cluster in {home} ...", file=sys.stderr, flush=True)
        info = cluster.up(bench_config(), dynamic_config=args.dynamic_config or None)
        print(
            f"cluster up in {time.monotonic() - started:.1f} s at {info.address}; measuring ...",
            file=sys.stderr,
            flush=True,
        )
        result = asyncio.run(
            run_bench(
                info, args.jobs, args.latency_samples, not args.no_timeline, args.dynamic_config, args.settle
            )
        )
    except KeyboardInterrupt:
        print("interrupted; stopping the cluster", file=sys.stderr)
        return 130
    finally:
        stop_cluster(cluster, home, created)
    print(format_report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        print(f"figures written to {args.json}")
    if args.check and not all(result.targets().values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
