"""`python -m benchmarks preempt`: submit of an interactive gang that must evict a batch gang -> its tasks running.

A local cluster with one 4-host slice and a short preemption grace (`--grace`, default 1 s). Each
sample: ana's batch gang fills the slice; once all four of its tasks run, bob submits an interactive
gang for the same slice, which evicts the batch gang whole. The figure is the time from bob's submit
to the moment the last of his four tasks has started (each task writes the wall time it started).
With `--ignore-term` the victims ignore SIGTERM, so every eviction waits the whole grace before
SIGKILL (the worst case); without it they exit on SIGTERM (the usual case). Target: the median
below the grace + 2 s. Prints figures; nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.session import quiet_logging, sigterm_as_interrupt, stop_cluster
from iris.client.iris_client import IrisClient
from iris.config.cluster_file import ClusterConfig, parse_config
from iris.local.cluster import LocalCluster
from iris.types import CoschedulingConfig, JobState, ResourceSpec

HOSTS = 4


def preempt_config(grace: float) -> ClusterConfig:
    """One 4-host slice and a short grace."""
    return parse_config(
        {
            "local": {
                "worker_groups": [
                    {"name": "bench-slice", "count": HOSTS, "resources": {"cpu": 1, "memory": "1g"},
                     "attributes": {"tpu-name": "bench-slice"}, "index_attribute": "tpu-worker-id"},
                ]
            },
            "sharing": {"preemption_grace": grace},
        },
        "preempt bench",
    )  # fmt: skip


def _gang() -> dict[str, object]:
    return {"resources": ResourceSpec(cpu=1, memory="128m", replicas=HOSTS),
            "coscheduling": CoschedulingConfig("tpu-name")}  # fmt: skip


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(0.02)


def one_sample(ana: IrisClient, bob: IrisClient, marks: Path, ignore_term: bool) -> float:
    """Seconds from bob's submit to the last of his gang's tasks running."""
    for old in marks.glob("*"):
        old.unlink()
    trap = "trap '' TERM; " if ignore_term else ""
    victim = ana.submit_command(
        ["sh", "-c", f'{trap}echo > {marks}/victim-$IRIS_TASK_INDEX-$IRIS_ATTEMPT; sleep 600'],
        name="sweep", priority="batch", **_gang(),  # type: ignore[arg-type]
    )  # fmt: skip
    _wait(lambda: len(list(marks.glob("victim-*-0"))) == HOSTS, 120, "the batch gang runs")
    submitted = time.time()
    urgent = bob.submit_command(
        ["sh", "-c", f"date +%s.%N > {marks}/urgent-$IRIS_TASK_INDEX; sleep 1"],
        name="urgent", priority="interactive", **_gang(),  # type: ignore[arg-type]
    )  # fmt: skip
    _wait(lambda: len(list(marks.glob("urgent-*"))) == HOSTS, 120, "the interactive gang runs")
    _wait(lambda: all((marks / f"urgent-{i}").read_text().strip() for i in range(HOSTS)), 10, "start times")
    running = max(float((marks / f"urgent-{i}").read_text()) for i in range(HOSTS))
    if urgent.wait(timeout=120).state != JobState.SUCCEEDED:
        raise RuntimeError(f"the interactive gang ended {urgent.status().state}")
    ana.terminate(victim.job_id)  # requeued after its eviction: killed before the next sample
    victim.wait(timeout=120, raise_on_failure=False)
    return running - submitted


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks preempt", description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=7, help="evictions measured (default 7)")
    parser.add_argument("--grace", type=float, default=1.0, help="preemption grace in seconds (default 1)")
    parser.add_argument("--ignore-term", action="store_true",
                        help="victims ignore SIGTERM: every eviction waits the grace")  # fmt: skip
    args = parser.parse_args(argv)
    if args.samples < 1 or args.grace < 0:
        parser.error("--samples must be >= 1 and --grace >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    home = Path(tempfile.mkdtemp(prefix="iris-bench-preempt-"))
    marks = Path(tempfile.mkdtemp(prefix="iris-bench-marks-"))
    cluster = LocalCluster(home)
    figures: list[float] = []
    try:
        with sigterm_as_interrupt():
            info = cluster.up(preempt_config(args.grace))
            with IrisClient.connect(info.address, store=info.store_url, user="ana") as ana, \
                    IrisClient.connect(info.address, store=info.store_url, user="bob") as bob:  # fmt: skip
                for i in range(args.samples):
                    figures.append(one_sample(ana, bob, marks, args.ignore_term))
                    print(f"sample {i + 1}/{args.samples}: {figures[-1]:.2f} s", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted; stopping the cluster", file=sys.stderr)
        return 130
    finally:
        stop_cluster(cluster, home, True)
    median = statistics.median(figures)
    target = args.grace + 2.0
    victims = "ignore SIGTERM (full grace)" if args.ignore_term else "exit on SIGTERM"
    print(f"preemption: submit of an interactive 4-task gang that evicts a batch gang -> its tasks running "
          f"(grace {args.grace:g} s, victims {victims}, {len(figures)} samples)")  # fmt: skip
    print(f"  median {median:.2f} s   min {min(figures):.2f} s   max {max(figures):.2f} s   "
          f"target < grace + 2 s = {target:g} s: {'met' if median < target else 'MISSED'}")  # fmt: skip
    return 0
