"""Fencing: nothing runs twice, even when hosts freeze — a Jepsen-style check from outside.

A supervised local cluster runs a stream of jobs (single tasks and two-host gangs) while a seeded
schedule freezes agents (SIGSTOP for 3x the lease, their tasks left running), cuts agents off from
Temporal (for 3x the lease: two more agents reach it only through a proxy that can stop carrying their
traffic, benchmarks/partition.py; the agent and its tasks run on), SIGKILLs agents and SIGKILLs the
controller. Every task appends `task attempt worker what time` records, fsynced, to a
file of its own while it runs, so the checks need nothing from Iris: the attempts of one task never
overlap in time, every job succeeds, and each task ended exactly once. The re-placement time of a
task (from its previous attempt's last record to its next attempt's first) is printed as a
distribution. `python -m benchmarks fencing --jobs 200 --lease 10`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.attempt_records import ends, gaps, overlaps, spans
from benchmarks.chaos import GANG_SLICES, chaos_config
from benchmarks.partition import PartitionableAgent
from iris.client.iris_client import IrisClient, Job
from iris.local.cluster import CONTROLLER, LocalCluster, worker_process_name
from iris.types import CoschedulingConfig, JobState, ResourceSpec

RECORDER = """\
import os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
env = os.environ
task, attempt, worker = env["IRIS_TASK_ID"], env["IRIS_ATTEMPT"], env["IRIS_WORKER_ID"]
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def record(what):
    os.write(fd, f"{task} {attempt} {worker} {what} {time.time():.3f}\\n".encode())
    os.fsync(fd)
record("start")
until = time.monotonic() + seconds
while time.monotonic() < until:
    time.sleep(0.2)
    record("alive")
record("end")
"""
FAULTS = ("agent SIGSTOP", "agent SIGKILL", "controller SIGKILL", "agent partition")
CUT_AGENTS = 2  # agents behind a proxy, for partitions
FINISH_SECONDS = 900.0


@dataclass
class FencingReport:
    """What a run did and what the checks found."""

    seed: int
    jobs: int
    lease: float
    faults: list[tuple[str, str]] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    replacements: list[float] = field(default_factory=list)
    reruns: int = 0  # tasks run again after they had ended (their agent froze before it could report)
    wall_seconds: float = 0.0

    def figures(self) -> str:
        counts: dict[str, int] = defaultdict(int)
        for kind, _ in self.faults:
            counts[kind] += 1
        lines = [
            f"fencing: seed {self.seed}, {self.jobs} jobs, lease {self.lease:g} s, {self.wall_seconds:.0f} s",
            "  faults: " + (", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "none"),
            f"  overlaps: {len(self.overlaps)}",
            f"  lost jobs: {len(self.lost)}",
            f"  tasks run again after ending (result lost with a frozen or killed agent): {self.reruns}",
        ]
        if self.replacements:
            ordered = sorted(self.replacements)
            p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
            lines.append(
                f"  re-placement (previous attempt's last record -> next attempt's first), {len(ordered)} tasks: "
                f"median {statistics.median(ordered):.1f} s, p90 {p90:.1f} s, max {ordered[-1]:.1f} s"
            )
        lines.extend(f"    {p}" for p in (self.overlaps + self.lost)[:20])
        return "\n".join(lines)


class FencingRun:
    """One run: the cluster in `home`, the load, the faults, the checks."""

    def __init__(self, home: Path, jobs: int, seed: int, lease: float, fault_every: float) -> None:
        self.home = home
        self.jobs = jobs
        self.lease = lease
        self.fault_every = fault_every
        self.rng = random.Random(seed)  # the faults
        self.load_rng = random.Random(seed + 1)  # the load, drawn in another thread
        self.report = FencingReport(seed, jobs, lease)
        self.config = chaos_config()
        self.local = LocalCluster(home)
        self.runs = home / "runs"
        self.script = home / "recorder.py"
        self.submitted: list[Job] = []
        self.done = threading.Event()
        self.cut_agents: list[PartitionableAgent] = []

    def run(self) -> FencingReport:
        began = time.monotonic()
        os.environ["IRIS_LEASE_SECONDS"] = str(self.lease)  # the cluster's agents inherit IRIS_* settings
        self.runs.mkdir(parents=True, exist_ok=True)
        self.script.write_text(RECORDER)
        info = self.local.up(self.config, supervise=True, ready_timeout=120)
        cpu = next(w for w in self.config.local_workers() if w.attributes.get("pool") == "cpu")
        for i in range(CUT_AGENTS):  # like the cpu group's workers, but partitionable
            spec = dataclasses.replace(cpu, worker_id=f"cut-{i}", attributes={"pool": "cpu"})
            self.cut_agents.append(PartitionableAgent(self.home, spec, info.address, info.store_url))
        client = IrisClient.connect(info.address, store=info.store_url)
        faults = threading.Thread(target=self._faults, name="fencing-faults", daemon=True)
        try:
            faults.start()
            for index in range(self.jobs):
                self._submit(client, index)
                time.sleep(self.load_rng.uniform(0.05, 0.4))
            self._finish(client)  # the faults go on until every job has ended
            self.done.set()
            faults.join()
            self._check()
        finally:
            self.done.set()
            client.close()
            self._down()
        self.report.wall_seconds = time.monotonic() - began
        return self.report

    def _submit(self, client: IrisClient, index: int) -> None:
        seconds = round(self.load_rng.uniform(4.0, 30.0), 1)  # many outlive a frozen agent's detection
        gang = self.load_rng.random() < 0.2
        argv = [sys.executable, str(self.script), str(self.runs / f"job-{index}"), str(seconds)]
        for attempt in range(30):  # the controller may be away for a moment: submit again
            try:
                job = client.submit_command(
                    argv, name=f"fencing-{index}",
                    resources=ResourceSpec(cpu=1 if gang else 0.5, memory="64m", replicas=2 if gang else 1),
                    coscheduling=CoschedulingConfig(group_by="tpu-name") if gang else None,
                    max_retries_preemption=100,
                )  # fmt: skip
                self.submitted.append(job)
                return
            except Exception:
                time.sleep(min(5.0, 0.5 * (attempt + 1)))
        self.report.lost.append(f"fencing-{index}: could not be submitted")

    def _faults(self) -> None:
        agents = [worker_process_name(s.worker_id) for s in self.config.local_workers()]
        while not self.done.wait(self.rng.uniform(0.5, 1.5) * self.fault_every):
            kind = self.rng.choice(FAULTS)
            if kind == "agent partition":
                cut = self.rng.choice(self.cut_agents)
                self.report.faults.append((kind, cut.spec.worker_id))
                cut.link.cut()
                time.sleep(3 * self.lease)
                cut.link.heal()
                continue
            target = CONTROLLER if kind == "controller SIGKILL" else self.rng.choice(agents)
            self.report.faults.append((kind, target))
            with contextlib.suppress(ValueError):
                if kind == "agent SIGSTOP":
                    self.local.kill_process(target, signal.SIGSTOP)
                    time.sleep(3 * self.lease)
                    self.local.kill_process(target, signal.SIGCONT)
                else:
                    self.local.kill_process(target, signal.SIGKILL, wait=5)

    def _finish(self, client: IrisClient) -> None:
        deadline = time.monotonic() + FINISH_SECONDS
        for job in self.submitted:
            try:
                status = job.wait(timeout=max(1.0, deadline - time.monotonic()), raise_on_failure=False)
            except Exception as err:
                self.report.lost.append(f"{job.job_id}: did not end: {type(err).__name__}: {err}")
                continue
            if status.state != JobState.SUCCEEDED:
                self.report.lost.append(f"{job.job_id}: {status.state}: {status.error}")

    def _check(self) -> None:
        for path in sorted(self.runs.iterdir()):
            self.report.overlaps.extend(overlaps(path))
            self.report.replacements.extend(gaps(path))
            ended = ends(path)
            self.report.lost.extend(f"{task}: never ended" for task in spans(path) if not ended.get(task))
            # A task that ended while its agent was frozen, its result lost with it, runs again: not at once.
            self.report.reruns += sum(max(0, count - 1) for count in ended.values())

    def _down(self) -> None:
        for cut in self.cut_agents:
            cut.stop()
        info = self.local.status()
        if info is not None:
            for name in info.pids:
                with contextlib.suppress(ValueError):
                    self.local.kill_process(name, signal.SIGCONT)
        self.local.down()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks fencing", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 10_000)
    parser.add_argument("--lease", type=float, default=10.0, help="the agents' lease, seconds")
    parser.add_argument("--fault-every", type=float, default=20.0, help="mean seconds between faults")
    parser.add_argument("--home", type=Path, default=None, help="a fresh IRIS_HOME (default: a temporary one)")
    args = parser.parse_args(list(argv))
    assert GANG_SLICES  # gangs land on the chaos fleet's two 2-host slices
    with tempfile.TemporaryDirectory(prefix="iris-fencing-") as tmp:
        report = FencingRun(args.home or Path(tmp), args.jobs, args.seed, args.lease, args.fault_every).run()
    print(report.figures())
    return 0 if not (report.overlaps or report.lost) else 1
