"""How long a task takes to start and to be gone under each runtime, measured in one run.

    python -m benchmarks.runtimes [--runs 10] [--runtimes process,docker,containerd]

Needs root and the engines (``tests/setup-engines.sh``): it starts a private ``dockerd`` and
``containerd`` (see ``engines``), loads its own image into them, and removes them afterwards.
For every runtime, ``--runs`` times, one task that prints a line and then sleeps:

- start -> running: from ``start()`` until the task's first line is in the log store (the
  task's process really runs, not just the engine's acknowledgement);
- kill -> gone: from ``kill()`` until it returns (the task is dead and, for containers, removed
  from the engine).

Then ``--runs`` shipped callables per runtime (``--cpu`` cores each, default 1), each through the
agent's own path (the task's area with its staged function, the staged runner code for
containers, ``task_runner_argv``), the process runtime both fresh and forked from its warm
interpreter:

- process start -> function: from the task process's creation (``/proc/self/stat``: 10 ms
  ticks, so up to 10 ms too high) to the function's first line, as the function measures it;
- start() -> function: from the runtime's ``start()`` call to the function's first line
  (for containers this includes creating the container; containerd creates the task's process
  before it starts it, so its "process start" includes some of that too);
- CPU before it: the task process's own CPU time at the function's first line.

Figures are printed (median, p90, max in milliseconds); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from benchmarks.engines import PYTHON_IMAGE, EngineUnavailable, PrivateContainerd, PrivateDockerd
from worker_agent.runtimes.base import ContainerRuntime, RuntimeName, TaskSpec
from worker_agent.storage import BlobStore, LogStore

_TASK = "import time; print('running', flush=True); time.sleep(600)"
_FUNCTION, _RESULT = "jobs/bench/function", "jobs/bench/result"


def _probe_factory() -> Any:
    """The bench's callable, made inside a function so cloudpickle ships it by value (no import of this module)."""

    def first_line() -> tuple[float, float, float]:
        import os
        import time

        wall, boot, cpu = time.time(), time.clock_gettime(time.CLOCK_BOOTTIME), time.process_time()
        with open("/proc/self/stat") as stat:
            text = stat.read()
        ticks = int(text[text.rfind(")") + 2 :].split()[19])
        return wall, boot - ticks / os.sysconf("SC_CLK_TCK"), cpu

    return first_line


@dataclass
class CallableFigures:
    """The samples of one runtime's callables, in seconds (CPU: the task process's own before its function)."""

    runtime: str
    process_to_function: list[float]
    start_to_function: list[float]
    cpu_to_function: list[float]

    def samples(self) -> tuple[list[float], list[float], list[float]]:
        """The three lists of samples, in field order."""
        return self.process_to_function, self.start_to_function, self.cpu_to_function


async def _measure_callables(
    runtime: ContainerRuntime, python: str, work: Path, runs: int, cpu_millis: int = 1000
) -> CallableFigures:
    """Run ``runs`` one-line callables the way the agent does; where their first lines came."""
    import cloudpickle

    from worker_agent.runtimes.base import Mount
    from worker_agent.task_area import TaskArea, stage_runner_code
    from worker_agent.task_runner import read_result, read_task_error, task_runner_argv

    logs = LogStore.from_url(str(work / "logs"))
    tasks = work / "tasks"
    tasks.mkdir(exist_ok=True)
    tasks.chmod(0o711)
    staged = None if runtime.name == RuntimeName.PROCESS else str(stage_runner_code(tasks))
    payload = cloudpickle.dumps((_probe_factory(), (), {}))
    job = f"bench-callables-{runtime.name}"
    process_to_function, start_to_function, cpu_to_function = [], [], []
    for attempt in range(runs):
        area = TaskArea.at(tasks, job, 0, attempt)
        area.create()
        own = BlobStore(area.store_dir)
        own.put(_FUNCTION, payload)
        with logs.open_writer(job, 0, attempt) as writer:
            spec = TaskSpec(
                argv=task_runner_argv(area.store_url, _FUNCTION, _RESULT, python), log=writer, image=PYTHON_IMAGE,
                job_id=job, attempt=attempt, cwd=str(area.work_dir), mounts=[Mount(str(area.path), read_only=False)],
                memory_bytes=256 << 20, cpu_millis=cpu_millis, runner_code=staged,
            )  # fmt: skip
            began = time.time()
            ended = await runtime.wait(await runtime.start(spec))
        if ended.exit_code != 0:
            why = read_task_error(own, _RESULT) or logs.read_lines(job, 0)[-5:]
            raise RuntimeError(f"{runtime.name}: the bench's callable failed ({ended}): {why}")
        wall, age, cpu = read_result(own, _RESULT)
        process_to_function.append(age)
        start_to_function.append(wall - began)
        cpu_to_function.append(cpu)
        area.remove()
    return CallableFigures(str(runtime.name), process_to_function, start_to_function, cpu_to_function)


@dataclass
class Figures:
    """The samples of one runtime, in seconds."""

    runtime: str
    start_to_running: list[float]
    kill_to_gone: list[float]


async def _measure(runtime: ContainerRuntime, python: str, logs: LogStore, runs: int) -> Figures:
    """Start, wait for the first line, kill; ``runs`` times."""
    starts, kills = [], []
    for attempt in range(runs):
        job = f"bench-{runtime.name}"
        writer = logs.open_writer(job, 0, attempt)
        spec = TaskSpec(
            argv=[python, "-c", _TASK], log=writer, image=PYTHON_IMAGE, job_id=job, attempt=attempt,
            memory_bytes=256 << 20, cpu_millis=1000,
        )  # fmt: skip
        began = time.perf_counter()
        handle = await runtime.start(spec)
        while "running" not in logs.read_lines(job, 0):
            if time.perf_counter() - began > 120:
                raise RuntimeError(f"{runtime.name}: the task printed nothing within 120 s")
            await asyncio.sleep(0.005)
        starts.append(time.perf_counter() - began)
        began = time.perf_counter()
        await runtime.kill(handle, grace_seconds=10)
        kills.append(time.perf_counter() - began)
        writer.close()
        logs_dir = logs.task_dir(job, 0)
        for path in logs_dir.iterdir():
            path.unlink()
    return Figures(str(runtime.name), starts, kills)


def _summary(samples: Sequence[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:7.0f} {p90 * 1000:7.0f} {ordered[-1] * 1000:7.0f}"


async def _run(
    names: Sequence[str], runs: int, work: Path, cpu_millis: int = 1000
) -> tuple[list[Figures], list[CallableFigures]]:
    from benchmarks.engines import write_python_image
    from worker_agent.runtimes.process import ProcessRuntime

    logs = LogStore.from_url(str(work / "logs"))
    archive = None
    results, callables = [], []
    for name in names:
        if name == RuntimeName.PROCESS:
            results.append(await _measure(ProcessRuntime(), sys.executable, logs, runs))
            fresh = await _measure_callables(ProcessRuntime(warm=False), sys.executable, work, runs, cpu_millis)
            callables.append(CallableFigures("process, fresh", *fresh.samples()))
            warm = ProcessRuntime()
            if not await warm.warm_up():
                raise RuntimeError("the process runtime's forkserver did not start")
            forked = await _measure_callables(warm, sys.executable, work, runs, cpu_millis)
            callables.append(CallableFigures("process, forked", *forked.samples()))
            await warm.close()
            continue
        archive = archive or write_python_image(work / "images.tar")
        runtime: ContainerRuntime
        if name == RuntimeName.DOCKER:
            from worker_agent.runtimes.docker import DockerRuntime

            dockerd = PrivateDockerd()
            try:
                dockerd.start()
                dockerd.load(archive)
                runtime = DockerRuntime(worker_id="bench", docker_host=dockerd.url)
                results.append(await _measure(runtime, "python3", logs, runs))
                callables.append(await _measure_callables(runtime, "python3", work, runs, cpu_millis))
                await runtime.close()
            finally:
                dockerd.stop()
        else:
            from worker_agent.runtimes.containerd import ContainerdRuntime

            containerd = PrivateContainerd()
            try:
                containerd.start()
                containerd.import_image(archive)
                runtime = ContainerdRuntime(worker_id="bench", socket=str(containerd.socket), log_dir=work / "cri-logs")
                results.append(await _measure(runtime, "python3", logs, runs))
                callables.append(await _measure_callables(runtime, "python3", work, runs, cpu_millis))
                await runtime.close()
            finally:
                containerd.stop()
    return results, callables


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print; 1 with a one-line reason if an engine cannot run here."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runtimes", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="tasks per runtime (default 10)")
    parser.add_argument("--runtimes", default="process,docker,containerd", help="comma-separated runtime names")
    parser.add_argument("--cpu", type=float, default=1.0, help="the callables' CPU limit in cores (default 1)")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    names = [n.strip() for n in args.runtimes.split(",") if n.strip()]
    unknown = [n for n in names if n not in {r.value for r in RuntimeName}]
    if unknown or args.runs < 1 or args.cpu <= 0:
        parser.error(f"unknown runtime(s) {unknown}" if unknown else "--runs and --cpu must be > 0")
    with tempfile.TemporaryDirectory(prefix="iris-runtime-bench-") as work:
        try:
            results, callables = asyncio.run(_run(names, args.runs, Path(work), round(args.cpu * 1000)))
        except EngineUnavailable as exc:
            print(f"runtime bench: {exc}", file=sys.stderr)
            return 1
    print(f"{args.runs} tasks per runtime; milliseconds: median p90 max")
    print(f"{'runtime':<12} {'start -> running':>24}   {'kill -> gone':>24}")
    for figures in results:
        print(f"{figures.runtime:<12} {_summary(figures.start_to_running):>24}   {_summary(figures.kill_to_gone):>24}")
    print()
    print(f"shipped callables ({args.cpu:g} cpu, 256 MiB); milliseconds: median p90 max")
    print(f"{'runtime':<16} {'process start -> function':>26}   {'start() -> function':>24}   {'CPU before it':>24}")
    for c in callables:
        print(
            f"{c.runtime:<16} {_summary(c.process_to_function):>26}   {_summary(c.start_to_function):>24}   "
            f"{_summary(c.cpu_to_function):>24}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
