"""How long a task takes to start and to be gone under each runtime, measured in one run.

    python -m worker_agent.runtimes.bench [--runs 10] [--runtimes process,docker,containerd]

Needs root and the engines (``tests/setup-engines.sh``): it starts a private ``dockerd`` and
``containerd`` (see ``engines``), loads its own image into them, and removes them afterwards.
For every runtime, ``--runs`` times, one task that prints a line and then sleeps:

- start -> running: from ``start()`` until the task's first line is in the log store (the
  task's process really runs, not just the engine's acknowledgement);
- kill -> gone: from ``kill()`` until it returns (the task is dead and, for containers, removed
  from the engine).

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

import structlog

from worker_agent.runtimes.base import ContainerRuntime, RuntimeName, TaskSpec
from worker_agent.runtimes.engines import PYTHON_IMAGE, EngineUnavailable, PrivateContainerd, PrivateDockerd
from worker_agent.storage import LogStore

_TASK = "import time; print('running', flush=True); time.sleep(600)"


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


async def _run(names: Sequence[str], runs: int, work: Path) -> list[Figures]:
    from worker_agent.runtimes.engines import write_python_image
    from worker_agent.runtimes.process import ProcessRuntime

    logs = LogStore.from_url(str(work / "logs"))
    archive = None
    results = []
    for name in names:
        if name == RuntimeName.PROCESS:
            results.append(await _measure(ProcessRuntime(), sys.executable, logs, runs))
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
                await runtime.close()
            finally:
                containerd.stop()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print; 1 with a one-line reason if an engine cannot run here."""
    parser = argparse.ArgumentParser(prog="python -m worker_agent.runtimes.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="tasks per runtime (default 10)")
    parser.add_argument("--runtimes", default="process,docker,containerd", help="comma-separated runtime names")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    names = [n.strip() for n in args.runtimes.split(",") if n.strip()]
    unknown = [n for n in names if n not in {r.value for r in RuntimeName}]
    if unknown or args.runs < 1:
        parser.error(f"unknown runtime(s) {unknown}" if unknown else "--runs must be >= 1")
    with tempfile.TemporaryDirectory(prefix="iris-runtime-bench-") as work:
        try:
            results = asyncio.run(_run(names, args.runs, Path(work)))
        except EngineUnavailable as exc:
            print(f"runtime bench: {exc}", file=sys.stderr)
            return 1
    print(f"{args.runs} tasks per runtime; milliseconds: median p90 max")
    print(f"{'runtime':<12} {'start -> running':>24}   {'kill -> gone':>24}")
    for figures in results:
        print(f"{figures.runtime:<12} {_summary(figures.start_to_running):>24}   {_summary(figures.kill_to_gone):>24}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
