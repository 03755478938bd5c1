"""A running task attempt's resource use, sampled from its runtime: peak memory and CPU seconds.

Why sampled: a runtime tells the current use of the task (its cgroup for containers, the live
members of its process group for host processes), not a high-water mark that survives the task.
So the agent asks every `USAGE_SAMPLE_SECONDS` while the task runs and keeps the highest memory
and the highest CPU time seen; what the task does in the last moments before it exits (less than
one interval) is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

from worker_agent.runtimes.base import ContainerRuntime, TaskHandle

__all__ = ["USAGE_SAMPLE_SECONDS", "TaskUsage", "sample_usage", "sampling"]

log = structlog.get_logger("iris.agent")

USAGE_SAMPLE_SECONDS = 0.5


@dataclass
class TaskUsage:
    """What one attempt used so far: the most memory at once, CPU seconds, and how long it has run."""

    peak_memory_bytes: int = 0
    cpu_seconds: float = 0.0
    started: float = 0.0  # monotonic time of the start
    ended: float = 0.0

    def __post_init__(self) -> None:
        if not self.started:
            self.started = time.monotonic()

    @property
    def run_seconds(self) -> float:
        return max(0.0, (self.ended or time.monotonic()) - self.started)

    def detail(self) -> dict[str, float]:
        """What a heartbeat carries, so a running attempt's use can be read (`iris job summary`)."""
        return {"peak_memory_bytes": self.peak_memory_bytes, "cpu_seconds": round(self.cpu_seconds, 3),
                "run_seconds": round(self.run_seconds, 3)}  # fmt: skip

    def add(self, memory_bytes: int, cpu_seconds: float) -> None:
        self.peak_memory_bytes = max(self.peak_memory_bytes, int(memory_bytes))
        self.cpu_seconds = max(self.cpu_seconds, float(cpu_seconds))


async def sample_usage(runtime: ContainerRuntime, handle: TaskHandle, usage: TaskUsage,
                       interval: float = USAGE_SAMPLE_SECONDS) -> None:  # fmt: skip
    """Add a sample of `handle`'s use to `usage` every `interval` until cancelled.

    A runtime that cannot tell (None, or an error) leaves `usage` as it is: usage is never worth
    failing a task for.
    """
    failed = False
    while True:
        try:
            stats = await runtime.stats(handle)
        except Exception as err:  # an engine hiccup: try again next time, say so once
            stats = None
            if not failed:
                failed = True
                log.warning("task_usage_unavailable", handle=handle, error=str(err))
        if stats is not None:
            usage.add(stats.memory_bytes, stats.cpu_seconds)
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def sampling(runtime: ContainerRuntime, handle: TaskHandle, usage: TaskUsage) -> AsyncIterator[TaskUsage]:
    """Sample `handle` into `usage` for the duration of the block; `usage.ended` is set on leaving."""
    sampler = asyncio.create_task(sample_usage(runtime, handle, usage))
    try:
        yield usage
    finally:
        usage.ended = time.monotonic()
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
