"""Chaos: a mixed load on a supervised local cluster under a seeded schedule of faults, checked from outside.

The load is callables with checked results, commands, two-host gangs, jobs that fail and jobs that are
killed. The faults are SIGKILLs of the controller, of agents and of the dev server, and SIGSTOPs of
agents past the heartbeat timeout; the cluster's supervisor brings back what died. Every task records
its start and end (job, task, attempt, worker, slice) in a file of its own, so the checks need nothing
from Iris: nothing lost, nothing run twice at once, gangs whole, no agent died that no fault touched,
every component back within the limit, and no process left after `iris cluster down`.

Recovery is measured as a user meets it, through the public client: from the fault until the process
table shows the component running again (a new process for a kill), a small job submitted after it has
succeeded, and `list_workers()` answers with every worker healthy; for an agent, the bench also times
until a job pinned to that agent has run. `python -m benchmarks chaos --jobs 240` prints the figures;
the test suite runs it small (tests/faults/test_chaos.py).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from benchmarks.replays import replay_all_sync
from iris.client.iris_client import IrisClient, Job
from iris.config.cluster_file import ClusterConfig, parse_config
from iris.local.cluster import CONTROLLER, TEMPORAL, LocalCluster, worker_process_name
from iris.types import Constraint, CoschedulingConfig, JobState, JobStatus, ResourceSpec
from workflows.tasks.task_workflow import HEARTBEAT_TIMEOUT

# An agent SIGSTOP lasts past the heartbeat timeouts (its session's 6 s, a running attempt's 10 s) and its lease.
STOP_SECONDS = HEARTBEAT_TIMEOUT.total_seconds() + 4.0
RECOVERY_LIMIT_SECONDS = 30.0  # every component runs again within this (the supervisor's promise)
MAX_WAITING = 12  # jobs of the load waiting for a place at once
FINISH_SECONDS = 600.0  # after the last fault, every job has ended within this
# The cluster takes work again within this, even on a machine loaded many times over. (A controller killed
# while it runs one of the scheduler's own activities stalls scheduling until that activity's 5 s heartbeat
# timeout, 10 s until 2026-12-06. Until 2026-12-03 the scheduler's deliveries had none: a controller killed
# while it sent them stalled scheduling for their 120 s start-to-close, 124-127 s in the suite's chaos run;
# below that, so such a stall fails the run.)
WHOLE_LIMIT_SECONDS = 90.0
GANG_SLICES = ("slice-a", "slice-b")
PROBE_CPU = 0.1
HOST_INDEX = "tpu-worker-id"  # host i of its group: with `pool`, names one worker (probes are pinned by it)


class Kind(StrEnum):
    """The kinds of job in the load, and of fault in the schedule."""

    CALLABLE = "callable"
    COMMAND = "command"
    GANG = "gang"
    FAILING = "failing"
    KILLED = "killed"


class Fault(StrEnum):
    CONTROLLER_KILL = "controller SIGKILL"
    AGENT_KILL = "agent SIGKILL"
    AGENT_STOP = "agent SIGSTOP"
    SERVER_KILL = "dev server SIGKILL"


EXPECTED = {
    Kind.CALLABLE: JobState.SUCCEEDED, Kind.COMMAND: JobState.SUCCEEDED, Kind.GANG: JobState.SUCCEEDED,
    Kind.FAILING: JobState.FAILED, Kind.KILLED: JobState.KILLED,
}  # fmt: skip
LOAD_MIX = (Kind.CALLABLE,) * 4 + (Kind.COMMAND,) * 3 + (Kind.GANG,) * 2 + (Kind.FAILING, Kind.KILLED)
FAULT_MIX = (Fault.CONTROLLER_KILL, Fault.AGENT_KILL, Fault.AGENT_STOP, Fault.SERVER_KILL)


def chaos_config(cpu_workers: int = 4) -> ClusterConfig:
    """Plain workers and two 2-host slices (for gangs)."""
    # Each worker has PROBE_CPU to spare beyond the load's tasks, so a probe always fits.
    groups: list[dict[str, Any]] = [{
        "name": "cpu", "count": cpu_workers, "resources": {"cpu": 2 + PROBE_CPU, "memory": "2g"},
        "attributes": {"pool": "cpu"}, "index_attribute": HOST_INDEX,
    }]  # fmt: skip
    for name in GANG_SLICES:
        groups.append({
            "name": name, "count": 2, "resources": {"cpu": 1 + PROBE_CPU, "memory": "1g"},
            "attributes": {"tpu-name": name, "pool": name}, "index_attribute": HOST_INDEX,
        })  # fmt: skip
    return parse_config({"local": {"worker_groups": groups}}, "chaos fleet")


# ---------------------------------------------------------------------------- the tasks


def checked_value(job_seed: int, task_index: int) -> int:
    """What a callable task returns: a value the checker can compute on its own."""
    return job_seed * 1000 + task_index


def chaos_callable(runs: str, job_seed: int, seconds: float) -> int:
    """A callable task: record start and end, sleep in between, return checked_value."""
    _record(runs, "start")
    time.sleep(seconds)
    _record(runs, "end")
    return checked_value(job_seed, int(os.environ["IRIS_TASK_INDEX"]))


def _record(runs: str, what: str) -> None:
    env = os.environ
    line = (f"{env['IRIS_JOB_ID']} {env['IRIS_TASK_INDEX']} {env['IRIS_ATTEMPT']} {env['IRIS_WORKER_ID']} "
            f"{what} {time.time():.3f}\n")  # fmt: skip
    with open(Path(runs) / env["IRIS_JOB_ID"], "a") as f:
        f.write(line)


def recording_command(runs: Path, seconds: float, exit_code: int = 0) -> list[str]:
    """A command task that records start and end as chaos_callable does, then exits with `exit_code`."""
    rec = '"$IRIS_JOB_ID $IRIS_TASK_INDEX $IRIS_ATTEMPT $IRIS_WORKER_ID'
    out = f'>> "{runs}/$IRIS_JOB_ID"'
    stamp = "$(date +%s.%N)"
    return ["sh", "-c", f'echo {rec} start {stamp}" {out}; sleep {seconds}; echo {rec} end {stamp}" {out}; '
            f"exit {exit_code}"]  # fmt: skip


# ---------------------------------------------------------------------------- the run


@dataclass
class Submitted:
    """One job of the load, and what became of it."""

    kind: Kind
    job: Job
    seed: int
    replicas: int
    submitted_at: float
    killed: bool = False
    status: JobStatus | None = None


@dataclass
class Recovery:
    """How long one fault took to mend: until the component ran again (`back_seconds`: a new process, the dev
    server answering on its address), until the cluster was whole and took work again (`seconds`), and for an
    agent, until it ran a job pinned to it (`pinned_seconds`, when measured)."""

    fault: Fault
    target: str
    seconds: float
    back_seconds: float = 0.0
    pinned_seconds: float | None = None


@dataclass
class ChaosReport:
    """What a run did and what the checks found; `problems` is empty when every check held."""

    seed: int
    jobs: int
    faults: list[Recovery] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    replayed: int = 0  # runs whose history replayed on the current code (scheduler, jobs, autoscaler)
    states: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent starting, under load, finishing, stopping
    leftover_processes: list[int] = field(default_factory=list)

    def figures(self) -> str:
        """The run in a few lines: recoveries by fault kind (median and max), outcomes, problems."""
        phases = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.phases.items())
        lines = [f"chaos: seed {self.seed}, {self.jobs} jobs, {len(self.faults)} faults, {self.wall_seconds:.0f} s "
                 f"({phases})"]  # fmt: skip
        for kind in Fault:
            times = [r.seconds for r in self.faults if r.fault == kind]
            if times:
                back = [r.back_seconds for r in self.faults if r.fault == kind]
                lines.append(f"  {kind:<20} running again in {statistics.median(back):5.1f} s median, "
                             f"{max(back):5.1f} s max ({len(times)} faults)")  # fmt: skip
                lines.append(f"  {'':<20} takes work again in {statistics.median(times):5.1f} s median, "
                             f"{max(times):5.1f} s max")  # fmt: skip
            pinned = [r.pinned_seconds for r in self.faults if r.fault == kind and r.pinned_seconds is not None]
            if pinned:
                lines.append(f"  {'':<20} runs a job pinned to it after {statistics.median(pinned):5.1f} s median, "
                             f"{max(pinned):5.1f} s max")  # fmt: skip
        lines.append("  jobs: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(self.states.items())))
        lines.append(f"  histories replayed on the current code: {self.replayed} runs (scheduler, jobs, autoscaler)")
        lines.append(f"  problems: {len(self.problems)}")
        lines.extend(f"    {p}" for p in self.problems[:20])
        return "\n".join(lines)


class ChaosRun:
    """One run: a supervised cluster in `home`, the load, the faults, the checks."""

    def __init__(
        self, home: Path, jobs: int, faults: int, seed: int, cpu_workers: int = 4, pinned_probes: bool = False,
        dynamic_config: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.home = home
        self.dynamic_config = dynamic_config
        self.jobs = jobs
        self.fault_count = faults
        self.rng = random.Random(seed)  # the faults
        self.load_rng = random.Random(seed + 1)  # the load, drawn in its own thread
        self.report = ChaosReport(seed=seed, jobs=jobs)
        self.config = chaos_config(cpu_workers)
        self.local = LocalCluster(home)
        self.runs = home / "runs"
        self.submitted: list[Submitted] = []
        self.targeted_kills: dict[str, int] = {}  # process name -> SIGKILLs aimed at it
        self.pid_history: dict[str, set[int]] = {}
        self.client: IrisClient | None = None
        self.pinned_probes = pinned_probes

    # -- the cluster

    def start(self) -> IrisClient:
        self.runs.mkdir(parents=True, exist_ok=True)
        info = self.local.up(self.config, self.dynamic_config, supervise=True, ready_timeout=120)
        self.client = IrisClient.connect(info.address, store=info.store_url)
        self._note_pids()
        return self.client

    def _note_pids(self) -> dict[str, int]:
        info = self.local.status()
        pids = dict(info.pids) if info is not None else {}
        for name, pid in pids.items():
            self.pid_history.setdefault(name, set()).add(pid)
        return pids

    def agents(self) -> list[str]:
        return [worker_process_name(s.worker_id) for s in self.config.local_workers()]

    # -- the load

    def submit_one(self, index: int) -> None:
        assert self.client is not None
        kind = self.load_rng.choice(LOAD_MIX)
        seconds = round(self.load_rng.uniform(0.5, 3.0), 2)
        seed = self.load_rng.randrange(1, 10**6)
        cpu = ResourceSpec(cpu=0.5, memory="64m")
        if kind == Kind.CALLABLE:
            replicas = self.load_rng.choice((1, 1, 2, 3))
            job = self.client.submit(
                chaos_callable, str(self.runs), seed, seconds, name=f"chaos-{index}-fn",
                resources=ResourceSpec(cpu=0.5, memory="64m", replicas=replicas),
            )  # fmt: skip
        elif kind == Kind.COMMAND:
            replicas = self.load_rng.choice((1, 2))
            job = self.client.submit_command(
                recording_command(self.runs, seconds), name=f"chaos-{index}-cmd",
                resources=ResourceSpec(cpu=0.5, memory="64m", replicas=replicas),
            )  # fmt: skip
        elif kind == Kind.GANG:
            replicas = 2
            job = self.client.submit_command(
                recording_command(self.runs, seconds), name=f"chaos-{index}-gang",
                resources=ResourceSpec(cpu=1, memory="64m", replicas=2),
                coscheduling=CoschedulingConfig(group_by="tpu-name"),
            )  # fmt: skip
        elif kind == Kind.FAILING:
            replicas = 1
            job = self.client.submit_command(
                recording_command(self.runs, 0.2, exit_code=3), name=f"chaos-{index}-fail", resources=cpu,
            )  # fmt: skip
        else:
            replicas = 1
            job = self.client.submit_command(
                recording_command(self.runs, 600), name=f"chaos-{index}-kill", resources=cpu,
            )  # fmt: skip
        self.submitted.append(Submitted(kind, job, seed, replicas, time.monotonic()))

    def kill_some(self) -> None:
        """Kill the KILLED-kind jobs that have been submitted for a while (running or still queued)."""
        for s in self.submitted:
            if s.kind == Kind.KILLED and not s.killed and time.monotonic() - s.submitted_at > 3:
                with contextlib.suppress(Exception):  # the control plane may be down: try again next round
                    s.job.terminate()
                    s.killed = True

    # -- the faults

    def inject(self, fault: Fault) -> Recovery:
        """Inject one fault and wait until the cluster is whole again (as the client sees it)."""
        before = self._note_pids()
        if fault == Fault.CONTROLLER_KILL:
            target = CONTROLLER
        elif fault == Fault.SERVER_KILL:
            target = TEMPORAL
        else:
            target = self.rng.choice(self.agents())
        started = time.monotonic()
        if fault == Fault.AGENT_STOP:
            self.local.kill_process(target, signal.SIGSTOP)
            time.sleep(STOP_SECONDS)
            self.local.kill_process(target, signal.SIGCONT)
            # Measured from the SIGCONT: the stop itself lasts as long as the schedule says.
            started = time.monotonic()
        else:
            self.targeted_kills[target] = self.targeted_kills.get(target, 0) + 1
            self.local.kill_process(target, signal.SIGKILL, wait=5)
        back, seconds = self._wait_whole(target, before.get(target) if fault != Fault.AGENT_STOP else None, started)
        pinned = None
        if self.pinned_probes and fault in (Fault.AGENT_KILL, Fault.AGENT_STOP):
            self._probe(self._pinned(target), started + RECOVERY_LIMIT_SECONDS + 60)
            pinned = time.monotonic() - started
        return Recovery(fault, target, seconds, back, pinned)

    def _wait_whole(self, target: str, old_pid: int | None, started: float) -> tuple[float, float]:
        """Seconds from `started` until `target` runs again (a new process if `old_pid`; the dev server answering
        on its port), and until the cluster is whole as a user meets it: a probe job has succeeded and
        `list_workers()` answers with every worker healthy. A problem is recorded past either limit."""
        assert self.client is not None
        deadline = started + WHOLE_LIMIT_SECONDS
        back = None
        while time.monotonic() < deadline:
            self.kill_some()
            pids = self._note_pids()
            if not self.local.down_components() and (old_pid is None or pids.get(target) != old_pid):
                back = time.monotonic() - started
                break
            time.sleep(0.1)
        if back is None or back > RECOVERY_LIMIT_SECONDS:
            self.report.problems.append(f"{target} not running again within {RECOVERY_LIMIT_SECONDS:.0f} s")
        self._probe([], deadline)
        expected = {s.worker_id for s in self.config.local_workers()}
        while time.monotonic() < deadline:
            try:
                workers = {w.worker_id: w.healthy for w in self.client.list_workers()}
            except Exception:  # not back yet
                workers = {}
            if expected <= {w for w, healthy in workers.items() if healthy}:
                return back or 0.0, time.monotonic() - started
            time.sleep(0.2)
        self.report.problems.append(f"the cluster did not take work within {WHOLE_LIMIT_SECONDS:.0f} s of {target}")
        return back or 0.0, time.monotonic() - started

    def _probe(self, constraints: list[Constraint], deadline: float) -> None:
        """Submit a small job ahead of the load (retrying while the control plane is away) and wait until it
        succeeds, or `deadline`."""
        assert self.client is not None
        probe = None
        while probe is None and time.monotonic() < deadline:
            try:
                probe = self.client.submit_command(
                    ["true"], name="chaos-probe", resources=ResourceSpec(cpu=PROBE_CPU, memory="16m"),
                    constraints=constraints, priority="production",
                )  # fmt: skip
            except ValueError:  # a bad request is the harness's bug, not an outage
                raise
            except Exception:  # the control plane is not back yet
                time.sleep(0.2)
        while probe is not None and time.monotonic() < deadline:
            self.kill_some()
            try:
                if probe.wait(timeout=1.0).state == JobState.SUCCEEDED:
                    return
            except TimeoutError:
                continue
            except Exception as err:
                self.report.problems.append(f"probe {constraints}: {type(err).__name__}: {err}")
                return

    def _pinned(self, target: str) -> list[Constraint]:
        """Constraints that place a probe on the agent `target` (none for the controller or the server)."""
        spec = next((s for s in self.config.local_workers() if worker_process_name(s.worker_id) == target), None)
        if spec is None:
            return []
        pool, index = spec.attributes["pool"], spec.attributes[HOST_INDEX]
        return [Constraint("pool", "EQ", pool), Constraint(HOST_INDEX, "EQ", index)]

    # -- the whole run

    def run(self) -> ChaosReport:
        began = mark = time.monotonic()

        def phase(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            self.report.phases[name] = now - mark
            mark = now

        try:
            self.start()
            phase("start")
            schedule = sorted(self.rng.sample(range(1, self.jobs), min(self.fault_count, self.jobs - 1)))
            faults = [FAULT_MIX[i % len(FAULT_MIX)] for i in range(self.fault_count)]
            self.rng.shuffle(faults)
            stop = threading.Event()
            pace = threading.Thread(target=self._submit_all, args=(stop,), daemon=True)
            pace.start()
            for at, fault in zip(schedule, faults, strict=False):
                while len(self.submitted) < at and pace.is_alive():
                    self.kill_some()
                    time.sleep(0.1)
                self.report.faults.append(self.inject(fault))
            pace.join()
            phase("load and faults")
            self._finish()
            phase("finish")
            self.check()
            self.replay()
            phase("replay")
        finally:
            mark = time.monotonic()
            self.down()
            phase("down")
            self.report.wall_seconds = time.monotonic() - began
        return self.report

    def _submit_all(self, stop: threading.Event) -> None:
        """Submit the load at an even pace (about 2 jobs a second), carrying on through the faults.

        No more than MAX_WAITING jobs wait for a place at once: a run measures recovery, not a backlog
        (on a loaded machine tasks start slowly, and a queue that only grows would hide every figure).
        """
        for index in range(self.jobs):
            while self._waiting() > MAX_WAITING:
                time.sleep(0.5)
            for _ in range(60):  # submitting may fail while the dev server is down: try again
                try:
                    self.submit_one(index)
                    break
                except (ValueError, TypeError):
                    raise
                except Exception:  # the control plane is away for a moment
                    time.sleep(1.0)
            else:
                self.report.problems.append(f"job {index} could not be submitted within a minute")
            time.sleep(self.load_rng.uniform(0.2, 0.8))

    def _waiting(self) -> int:
        """Jobs of the load that wait for a place now (0 while the control plane cannot say)."""
        assert self.client is not None
        try:
            return len(self.client.list_jobs(limit=MAX_WAITING + 1, state="PENDING"))
        except Exception:  # the dev server is away for a moment: go on
            return 0

    def _finish(self) -> None:
        """Kill what must be killed, then wait until every job has ended."""
        deadline = time.monotonic() + FINISH_SECONDS
        while time.monotonic() < deadline and any(
            s.kind == Kind.KILLED and not s.killed for s in self.submitted
        ):
            self.kill_some()
            time.sleep(0.5)
        assert self.client is not None
        for s in self.submitted:
            try:
                status = s.job.wait(timeout=max(1.0, deadline - time.monotonic()), raise_on_failure=False)
            except Exception as err:
                self.report.problems.append(f"{s.job.job_id} ({s.kind}): did not end: {type(err).__name__}: {err}")
                continue
            self.report.states[status.state] = self.report.states.get(status.state, 0) + 1
            s.status = status

    # -- the checks

    def check(self) -> None:
        problems = self.report.problems
        for s in self.submitted:
            status = s.status
            if status is None:
                continue
            if status.state != EXPECTED[s.kind]:
                problems.append(f"{s.job.job_id} ({s.kind}): {status.state}, expected {EXPECTED[s.kind]}: "
                                f"{status.error}")  # fmt: skip
                continue
            if s.kind == Kind.CALLABLE:
                want = [checked_value(s.seed, i) for i in range(s.replicas)]
                got = s.job.results()
                if got != want:
                    problems.append(f"{s.job.job_id}: results {got}, expected {want}")
            if s.kind == Kind.FAILING and [t.exit_code for t in status.tasks] != [3]:
                problems.append(f"{s.job.job_id}: exit codes {[t.exit_code for t in status.tasks]}, expected [3]")
            problems.extend(self._check_runs(s))
        for name, pids in self.pid_history.items():
            restarts = len(pids) - 1
            allowed = self.targeted_kills.get(name, 0)
            if name != "supervisor" and restarts > allowed:
                problems.append(f"{name} was started {restarts} times, but only {allowed} faults killed it")

    def _check_runs(self, s: Submitted) -> list[str]:
        """Nothing ran twice at once (per task, attempts never overlap), and a gang attempt ran whole on one slice."""
        path = self.runs / s.job.job_id
        records: dict[tuple[int, int], dict[str, Any]] = {}
        for line in path.read_text().splitlines() if path.exists() else []:
            _job, index, attempt, worker, what, when = line.split()
            rec = records.setdefault((int(index), int(attempt)), {"worker": worker})
            rec[what] = float(when)
        problems = []
        for task in range(s.replicas):
            spans = sorted(
                ((r["start"], r.get("end")) for (t, _), r in records.items() if t == task and "start" in r),
                key=lambda span: span[0],
            )
            for (_, end), (next_start, _) in itertools.pairwise(spans):
                if end is not None and next_start < end:
                    problems.append(f"{s.job.job_id} task {task}: two attempts ran at once")
            if EXPECTED[s.kind] == JobState.SUCCEEDED and not any(end is not None for _, end in spans):
                problems.append(f"{s.job.job_id} task {task}: succeeded without a finished run")
        if s.kind == Kind.GANG:
            assert s.status is not None
            final = {t.task_index: t.worker_id for t in s.status.tasks}
            slices = {w.rsplit("-", 1)[0] for w in final.values()}
            if len(slices) != 1 or [final[i] for i in sorted(final)] != [f"{next(iter(slices))}-{i}" for i in
                                                                         range(s.replicas)]:
                problems.append(f"{s.job.job_id}: gang not whole on one slice in host order: {final}")
        return problems

    def replay(self) -> None:
        """Every scheduler, job and autoscaler run of this cluster replays on the current code."""
        info = self.local.status()
        if info is None:
            self.report.problems.append("replay: the cluster is gone, nothing to replay")
            return
        try:
            replays = replay_all_sync(info.address)
        except Exception as err:  # the server does not answer: said, not a crash
            self.report.problems.append(f"replay: could not replay the histories: {type(err).__name__}: {err}")
            return
        self.report.replayed = replays.replayed
        self.report.problems.extend(f"replay: {failure}" for failure in replays.failures)

    # -- the end

    def down(self) -> None:
        """`iris cluster down`, as a user runs it; then look for any process left of this cluster."""
        if self.client is not None:
            self.client.close()
        env = {**os.environ, "IRIS_HOME": str(self.home)}
        env.pop("IRIS_TEMPORAL_ADDRESS", None)
        info = self.local.status()
        if info is not None:  # a stopped process would not act on SIGTERM
            for name in info.pids:
                with contextlib.suppress(ValueError):
                    self.local.kill_process(name, signal.SIGCONT)
        subprocess.run([sys.executable, "-m", "iris", "cluster", "down"], env=env, capture_output=True, timeout=120,
                       check=False)  # fmt: skip
        self.report.leftover_processes = processes_of(self.home)
        if self.report.leftover_processes:
            self.report.problems.append(f"processes left after `iris cluster down`: {self.report.leftover_processes}")
            for pid in self.report.leftover_processes:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()


def processes_of(home: Path) -> list[int]:
    """Live processes of the cluster in `home`: its IRIS_HOME in their environment or their command line."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("IRIS_HOME") == str(home) or str(home) in " ".join(proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def run_chaos(
    home: Path, jobs: int = 60, faults: int = 6, seed: int = 1, cpu_workers: int = 4, pinned_probes: bool = False,
    dynamic_config: Mapping[str, str] | None = None,
) -> ChaosReport:  # fmt: skip
    """Run the chaos load in `home` (a fresh directory); the report says what held and what did not.

    With `pinned_probes`, each agent fault is also timed until a job pinned to that agent ran. `dynamic_config`
    goes to the dev server (the suite's run shortens how long Temporal waits for a killed controller with it).
    """
    return ChaosRun(home, jobs, faults, seed, cpu_workers, pinned_probes, dynamic_config).run()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=240)
    parser.add_argument("--faults", type=int, default=16)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 10_000)
    parser.add_argument("--cpu-workers", type=int, default=4)
    parser.add_argument("--home", type=Path, default=None, help="a fresh IRIS_HOME (default: a temporary one)")
    parser.add_argument("--no-pinned-probes", action="store_true", help="do not time agents until they run a job")
    args = parser.parse_args(list(argv))
    import tempfile

    with tempfile.TemporaryDirectory(prefix="iris-chaos-") as tmp:
        report = run_chaos(
            args.home or Path(tmp), args.jobs, args.faults, args.seed, args.cpu_workers, not args.no_pinned_probes
        )
    print(report.figures())
    return 0 if not report.problems else 1
