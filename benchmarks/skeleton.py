"""The design skeleton's processes and its throughput run (see the `benchmarks.skeleton_workflows` package).

Two processes, as Iris has: one serving the skeleton's workflows (sandboxed), its pass
activity and its signal-sending local activity, like the controller; one serving the
agent's activity on its own task queue, like a worker agent. The bench starts both, runs
`count` skeleton jobs at once against them and stops them.

`python -m benchmarks.skeleton workflows|agent --address HOST:PORT --queue Q --agent-queue A
--scheduler ID` runs one of the two processes (the bench does this itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from activities.coalescer import SignalCoalescer
from benchmarks.figures import Throughput, timed_gather
from benchmarks.history import count_histories
from benchmarks.repo import REPO
from benchmarks.skeleton_workflows.job import SkeletonJob
from benchmarks.skeleton_workflows.names import ENQUEUE, PASS_ACTIVITY, RELEASE, RUN_ACTIVITY, SIGNAL_ACTIVITY, STATE
from benchmarks.skeleton_workflows.scheduler import SkeletonScheduler
from benchmarks.skeleton_workflows.task import SkeletonTask

READY_TIMEOUT_SECONDS = 60.0


class ControllerSide:
    """The controller process's activities: the signal-sending local activity and the pass."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._coalescers: dict[str, SignalCoalescer] = {}

    @activity.defn(name=SIGNAL_ACTIVITY)
    async def send(self, deliveries: list[list[str]]) -> None:
        """Send each `[workflow_id, signal, arg]`; enqueues go coalesced, as the controller's do."""

        async def one(workflow_id: str, name: str, arg: str) -> None:
            if name == ENQUEUE:
                if workflow_id not in self._coalescers:
                    self._coalescers[workflow_id] = SignalCoalescer(self.client, workflow_id, ENQUEUE, 500)
                await self._coalescers[workflow_id].send(arg)
            else:
                await self.client.get_workflow_handle(workflow_id).signal(name, arg)

        await asyncio.gather(*(one(*d) for d in deliveries))

    @staticmethod
    @activity.defn(name=PASS_ACTIVITY)
    async def place(task_ids: list[str]) -> list[str]:
        """The pass: everything queued is placed (the skeleton has no capacity to check)."""
        return task_ids


class AgentSide:
    """The agent process's activity."""

    def __init__(self, client: Client, scheduler_id: str) -> None:
        self.client = client
        self._releases = SignalCoalescer(client, scheduler_id, RELEASE, 500)

    @activity.defn(name=RUN_ACTIVITY)
    async def run(self, job_id: str, task_id: str) -> float:
        """Start `true`, heartbeat, wait, give the place back; when it began.

        As Iris's agent does, the job hears that the task runs by a signal sent beside the
        wait, which is dropped if the process ends first (the job learns it from the end).
        """
        began = time.time()
        process = await asyncio.create_subprocess_exec("true")
        started = asyncio.ensure_future(self.client.get_workflow_handle(job_id).signal("task_started"))
        try:
            activity.heartbeat("process-started")
            await process.wait()
        finally:
            started.cancel()
        await self._releases.send(task_id)
        return began


async def serve(role: str, address: str, queue: str, agent_queue: str, scheduler_id: str) -> None:
    """Serve one side until SIGTERM."""
    client = await Client.connect(address)
    if role == "workflows":
        side = ControllerSide(client)
        worker = Worker(
            client, task_queue=queue, workflows=[SkeletonJob, SkeletonTask, SkeletonScheduler],
            activities=[side.send, side.place], max_concurrent_workflow_tasks=200,
        )  # fmt: skip
    else:
        worker = Worker(client, task_queue=agent_queue, activities=[AgentSide(client, scheduler_id).run])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        await stop.wait()


@contextlib.contextmanager
def _processes(address: str, queue: str, agent_queue: str, scheduler_id: str) -> Iterator[dict[str, int]]:
    """The two skeleton processes, stopped (and waited for) on the way out; their pids by name."""
    base = [sys.executable, "-m", "benchmarks.skeleton"]
    args = ["--address", address, "--queue", queue, "--agent-queue", agent_queue, "--scheduler", scheduler_id]
    procs = {
        name: subprocess.Popen([*base, role, *args], cwd=REPO)
        for name, role in (("skeleton controller", "workflows"), ("skeleton agent", "agent"))
    }
    try:
        yield {name: p.pid for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def measure_skeleton(client: Client, count: int, pids: Mapping[str, int], settle: float = 0.0) -> Throughput:
    """`count` skeleton jobs started at once (after one warm-up job and `settle` seconds), each awaited;
    the CPU of both skeleton processes included."""
    run = uuid.uuid4().hex[:8]
    queue, agent_queue, scheduler_id = f"iris-skeleton-{run}", f"iris-skeleton-agent-{run}", f"iris-skeleton-{run}"
    address = client.service_client.config.target_host
    with _processes(address, queue, agent_queue, scheduler_id) as children:
        scheduler = await client.start_workflow(
            SkeletonScheduler.run, agent_queue, id=scheduler_id, task_queue=queue
        )
        try:

            async def start(i: int) -> WorkflowHandle[Any, float]:
                return await client.start_workflow(
                    SkeletonJob.run, scheduler_id, id=f"{scheduler_id}-job-{i}", task_queue=queue,
                    search_attributes=TypedSearchAttributes([SearchAttributePair(STATE, "PENDING")]),
                    memo={"state": "PENDING"},
                )  # fmt: skip

            async def finish(handle: WorkflowHandle[Any, float]) -> float:
                return await handle.result()

            warm = await start(-1)
            await asyncio.wait_for(finish(warm), READY_TIMEOUT_SECONDS)  # both processes serve
            figures, handles = await timed_gather(count, start, finish, {**pids, **children}, settle)
        finally:
            await scheduler.terminate("bench over")
    jobs = [h.id for h in handles]
    figures.add_history(await count_histories(client, {"job": jobs, "task": [f"{j}/task-0" for j in jobs]}))
    figures.add_history(
        await count_histories(client, {"scheduler": [scheduler_id]}, figures.started_at, figures.ended_at)
    )
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """Run one skeleton process (`workflows` or `agent`)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.skeleton")
    parser.add_argument("role", choices=["workflows", "agent"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--agent-queue", required=True)
    parser.add_argument("--scheduler", required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.role, args.address, args.queue, args.agent_queue, args.scheduler))
    return 0


if __name__ == "__main__":
    code = main()
    # The SDK's native threads can outlive the interpreter's teardown and abort it ("PyGILState_Release",
    # temporalio/sdk-python#300); once the worker has stopped there is nothing left to clean up.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
