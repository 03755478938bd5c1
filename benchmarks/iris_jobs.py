"""Iris's side: one-task jobs through the client, timed from submit to the task running, on both paths.

Every figure is taken for commands (`submit_command`) and for shipped callables (`submit(fn)`),
the way most people use Iris from Python. The command's latency job prints `date +%s.%N` and the
bench reads it back from the task's log, so "running" is the moment the process really started;
the callable's latency job returns the time of its function's first line (and how long after
its process was created that line came), so "running" is the moment the user's code started.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from activities.contracts import SCHEDULER_WORKFLOW_ID, task_workflow_id
from benchmarks.figures import WARMUP_SAMPLES, Latency, Throughput, timed_gather
from benchmarks.history import count_histories
from benchmarks.host import CpuMeter
from iris.client.async_client import AsyncIrisClient
from iris.client.iris_client import IrisClient
from iris.config.cluster_file import ClusterConfig, parse_config
from iris.types import JobState, ResourceSpec

TASK_CPU = 0.1
TASK_MEMORY = "32m"
BENCH_FLEET: dict[str, Any] = {
    "local": {
        "worker_groups": [
            {"name": "bench", "count": 2, "resources": {"cpu": 16, "memory": "16g"}},
        ]
    }
}
"""Two local workers with room for 2 x 160 tasks of 0.1 cpu / 32 MiB: capacity never limits the run.

The default fleet (`iris.config.cluster_file.default_config`: 2 workers x 2 cores, 4 GiB) fits only 2 x 4
tasks of the default 1 GiB, or 2 x 20 of 0.1 cpu, so 200 jobs at once would measure queueing.
"""
LATENCY_COMMAND = ["sh", "-c", "date +%s.%N"]
THROUGHPUT_COMMAND = ["true"]


class Entry(StrEnum):
    """How a bench job names its work: a command, or a callable shipped by value."""

    COMMANDS = "commands"
    CALLABLES = "callables"


def latency_function() -> Callable[[], tuple[float, float]]:
    """The callable latency job: made in a function so cloudpickle ships it by value, like a user's script's."""

    def first_line() -> tuple[float, float]:
        import os
        import time

        wall, boot = time.time(), time.clock_gettime(time.CLOCK_BOOTTIME)
        with open("/proc/self/stat") as stat:
            text = stat.read()
        ticks = int(text[text.rfind(")") + 2 :].split()[19])  # the process's creation, in 10 ms ticks since boot
        return wall, boot - ticks / os.sysconf("SC_CLK_TCK")

    return first_line


def throughput_function() -> Callable[[], None]:
    """The callable throughput job, the `true` of callables (shipped by value)."""

    def nothing() -> None:
        return None

    return nothing
JOB_TIMEOUT_SECONDS = 120.0
PUBLIC_API_THREADS = 16


def bench_config() -> ClusterConfig:
    """The bench fleet (see BENCH_FLEET)."""
    return parse_config(BENCH_FLEET, "benchmarks fleet")


def _resources() -> ResourceSpec:
    """Every bench task's request: small, so all 200 throughput jobs fit on the bench fleet at once."""
    return ResourceSpec(cpu=TASK_CPU, memory=TASK_MEMORY)


async def _wait_succeeded(iris: AsyncIrisClient, job_id: str) -> None:
    """Wait for `job_id`; a job that ends in any other state than SUCCEEDED fails the bench."""
    status = await iris.wait(job_id, timeout=JOB_TIMEOUT_SECONDS)
    if status.state != JobState.SUCCEEDED:
        raise RuntimeError(f"bench job {job_id} ended {status.state}: {status.error or status.tasks}")


def _process_start(lines: Sequence[str], job_id: str) -> float:
    """The `date +%s.%N` the latency job printed (its last parseable line)."""
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            return float(line.strip())
    raise RuntimeError(f"bench job {job_id} printed no timestamp; its log: {list(lines)!r}")


@dataclass(frozen=True)
class JobSample:
    """One latency job: wall-clock times of submit, running and SUCCEEDED seen, and the submit call's cost."""

    job_id: str
    submitted_at: float
    running_at: float
    """The command's process started, or the callable's function reached its first line."""
    submit_call: float
    """Seconds `submit_command`/`submit` took to return."""
    done_at: float
    process_to_function: float | None = None
    """Callables: seconds from the task process's creation to the function's first line (10 ms ticks)."""


async def submit_job(iris: AsyncIrisClient, entry: Entry, name: str, latency: bool = False) -> str:
    """Submit one bench job of either kind (the latency job or the throughput job); its id."""
    if entry is Entry.COMMANDS:
        return await iris.submit_command(LATENCY_COMMAND if latency else THROUGHPUT_COMMAND,
                                         resources=_resources(), name=name)  # fmt: skip
    fn = latency_function() if latency else throughput_function()
    return await iris.submit(fn, resources=_resources(), name=name)


async def iris_latency_sample(iris: AsyncIrisClient, name: str, entry: Entry = Entry.COMMANDS) -> JobSample:
    """One one-task job on the idle cluster, from just before the submit call to SUCCEEDED seen."""
    t0 = time.time()
    job_id = await submit_job(iris, entry, name, latency=True)
    submitted = time.time() - t0
    await _wait_succeeded(iris, job_id)
    done = time.time()
    if entry is Entry.COMMANDS:
        running = _process_start(iris.fetch_task_logs(job_id, 0), job_id)
        return JobSample(job_id, t0, running, submitted, done)
    running, process_to_function = (await iris.results(job_id))[0]
    return JobSample(job_id, t0, running, submitted, done, process_to_function)


@dataclass(frozen=True)
class IrisFigures:
    """Iris's figures on one path: submit->running, submit->SUCCEEDED seen, the submit call, throughput."""

    entry: Entry
    latency: Latency
    done: Latency
    submit_call: Latency
    throughput: Throughput
    public_api: Throughput
    """`count` one-task jobs through the blocking IrisClient from PUBLIC_API_THREADS threads: what users see."""
    last: JobSample
    """The last latency sample, whose history the timeline shows."""
    process_to_function: Latency | None = None
    """Callables: the task process's creation to the function's first line, per latency sample."""


async def measure_iris(
    iris: AsyncIrisClient, samples: int, count: int, pids: Mapping[str, int], settle: float = 0.0,
    entry: Entry = Entry.COMMANDS,
) -> IrisFigures:  # fmt: skip
    """Sequential submit-to-running latency (after warm-up), then `count` one-task jobs at once, then the
    public API run, all with `entry` jobs; each throughput run after `settle` quiet seconds."""
    tag = "" if entry is Entry.COMMANDS else "fn-"
    for i in range(WARMUP_SAMPLES):
        await iris_latency_sample(iris, f"bench-{tag}warmup-{i}", entry)
    rows = [await iris_latency_sample(iris, f"bench-{tag}latency-{i}", entry) for i in range(samples)]

    async def start(i: int) -> str:
        return await submit_job(iris, entry, f"bench-{tag}tput-{i}")

    async def finish(job_id: str) -> None:
        await _wait_succeeded(iris, job_id)

    throughput, job_ids = await timed_gather(count, start, finish, pids, settle)
    throughput.add_history(
        await count_histories(iris.temporal, {"job": job_ids, "task": [task_workflow_id(j, 0) for j in job_ids]})
    )
    throughput.add_history(
        await count_histories(
            iris.temporal, {"scheduler": [SCHEDULER_WORKFLOW_ID]}, throughput.started_at, throughput.ended_at
        )
    )
    public_api = await asyncio.to_thread(measure_public_api, iris.temporal.service_client.config.target_host,
                                         iris.store_url, count, pids, settle=settle, entry=entry)
    ages = tuple(r.process_to_function for r in rows if r.process_to_function is not None)
    return IrisFigures(
        entry=entry,
        process_to_function=Latency(ages) if ages else None,
        latency=Latency(tuple(r.running_at - r.submitted_at for r in rows)),
        done=Latency(tuple(r.done_at - r.submitted_at for r in rows)),
        submit_call=Latency(tuple(r.submit_call for r in rows)),
        throughput=throughput,
        public_api=public_api,
        last=rows[-1],
    )


def measure_public_api(address: str, store: str, count: int, pids: Mapping[str, int],
                       threads: int = PUBLIC_API_THREADS, settle: float = 0.0,
                       entry: Entry = Entry.COMMANDS) -> Throughput:
    """Submit `count` one-task jobs (`entry`) from `threads` threads of one blocking IrisClient, then wait for
    all (after `settle` quiet seconds)."""
    client = IrisClient.connect(address, store=store)
    tag = "" if entry is Entry.COMMANDS else "fn-"

    def submit(i: int) -> Any:
        if entry is Entry.COMMANDS:
            return client.submit_command(THROUGHPUT_COMMAND, resources=_resources(), name=f"bench-{tag}api-{i}")
        return client.submit(throughput_function(), resources=_resources(), name=f"bench-{tag}api-{i}")

    time.sleep(settle)
    meter = CpuMeter(pids)
    meter.start()
    wall = time.time()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        jobs = list(pool.map(submit, range(count)))
        accepted = time.perf_counter() - t0
        finals = list(pool.map(lambda job: job.wait(timeout=JOB_TIMEOUT_SECONDS), jobs))
    elapsed = time.perf_counter() - t0
    failed = [s.job_id for s in finals if s.state != JobState.SUCCEEDED]
    if failed:
        raise RuntimeError(f"bench jobs did not succeed: {failed[:5]}")
    return Throughput(count=count, elapsed=elapsed, accepted=accepted, cpu=meter.stop(), started_at=wall,
                      ended_at=wall + elapsed)
