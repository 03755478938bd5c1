"""The raw baseline: a bare Temporal workflow with one no-op activity, on the same dev server as Iris.

Next to it, the same bare workflow run as the child of a bare parent: the shape of an
Iris job (a job workflow with one child workflow per task) with none of Iris's work in it
(no scheduler, no signals). Its rate is the ceiling that shape alone allows on this server.

Both run on an unsandboxed in-process worker (they import nothing and do nothing
non-deterministic). Two more pair runs tell where the distance to that ceiling comes from,
for information only: the same pairs on a worker with the SDK's default sandbox (which Iris
keeps on), and unsandboxed pairs whose activity runs `true` as a process (as an Iris task does).
Last, the design skeleton (`benchmarks.skeleton`): Iris's shape and Temporal traffic with
none of Iris's logic, in two processes of its own; the throughput target is written against it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from benchmarks.bare_workflows import (
    BARE_ACTIVITY,
    PARENT_WORKFLOW,
    PROCESS_ACTIVITY,
    BareWorkflow,
    ParentWorkflow,
)
from benchmarks.figures import WARMUP_SAMPLES, Latency, Throughput, timed_gather
from benchmarks.history import count_histories
from benchmarks.skeleton import measure_skeleton


@activity.defn(name=BARE_ACTIVITY)
async def bare_noop() -> float:
    """The raw baseline's only activity: return the wall-clock time at which it began."""
    return time.time()


@activity.defn(name=PROCESS_ACTIVITY)
async def bare_true() -> float:
    """Like `bare_noop`, but it runs `true` as a child process first, as an Iris task of `true` does."""
    began = time.time()
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()
    return began


@dataclass(frozen=True)
class RawFigures:
    """The bare dev server's figures: start->activity and start->result latency, and throughput.

    `parent_child` is the throughput of bare parent + child pairs, measured right after.
    """

    latency: Latency
    done: Latency
    throughput: Throughput
    parent_child: Throughput
    sandboxed_pairs: Throughput
    """The same pairs on a worker with the SDK's default sandbox."""
    process_pairs: Throughput
    """Unsandboxed pairs whose child's activity runs `true` as a process."""
    skeleton: Throughput
    """The design skeleton's one-task jobs (see `benchmarks.skeleton_workflows`)."""


async def measure_raw(
    client: Client, samples: int, count: int, pids: Mapping[str, int], settle: float = 0.0
) -> RawFigures:
    """The bare dev server: sequential start-to-activity latency, then `count` workflows at once.

    The worker runs unsandboxed: the bare workflow imports nothing and does nothing
    non-deterministic, and the baseline should be the engine, not the Python sandbox.
    Each throughput run begins after `settle` quiet seconds.
    """
    queue = f"iris-bench-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BareWorkflow, ParentWorkflow],
        activities=[bare_noop, bare_true],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_workflow_tasks=200,  # as the Iris controller's worker
    )
    async with worker:

        async def one(i: int) -> tuple[float, float]:
            t0 = time.time()
            began: float = await client.execute_workflow(BareWorkflow.run, id=f"{queue}-lat-{i}", task_queue=queue)
            return began - t0, time.time() - t0

        for i in range(WARMUP_SAMPLES):
            await one(-1 - i)
        pairs = [await one(i) for i in range(samples)]

        async def start(i: int) -> Any:
            return await client.start_workflow(BareWorkflow.run, id=f"{queue}-tput-{i}", task_queue=queue)

        throughput, handles = await timed_gather(count, start, _result, pids, settle)
        parent_child = await _pairs(client, queue, "pair", count, pids, settle)
        process_pairs = await _pairs(client, queue, "process", count, pids, settle, [PROCESS_ACTIVITY])
    sandboxed_pairs = await _sandboxed_pairs(client, count, pids, settle)
    skeleton = await measure_skeleton(client, count, pids, settle)
    throughput.add_history(await count_histories(client, {"bare": [h.id for h in handles]}))
    return RawFigures(
        latency=Latency(tuple(p[0] for p in pairs)),
        done=Latency(tuple(p[1] for p in pairs)),
        throughput=throughput,
        parent_child=parent_child,
        sandboxed_pairs=sandboxed_pairs,
        process_pairs=process_pairs,
        skeleton=skeleton,
    )


async def _result(handle: Any) -> object:
    """A started workflow's result, once it ends."""
    result: object = await handle.result()
    return result


async def _pairs(
    client: Client,
    queue: str,
    kind: str,
    count: int,
    pids: Mapping[str, int],
    settle: float,
    args: Sequence[str] = (),
) -> Throughput:
    """`count` bare parent+child pairs at once on `queue` (whose worker runs); `args`: the child's activity."""

    async def start(i: int) -> Any:
        return await client.start_workflow(
            PARENT_WORKFLOW, args=list(args), id=f"{queue}-{kind}-{i}", task_queue=queue
        )

    figures, parents = await timed_gather(count, start, _result, pids, settle)
    figures.add_history(
        await count_histories(
            client, {"parent": [h.id for h in parents], "child": [f"{h.id}/child" for h in parents]}
        )
    )
    return figures


async def _sandboxed_pairs(client: Client, count: int, pids: Mapping[str, int], settle: float) -> Throughput:
    """Bare pairs on a worker with the SDK's default workflow runner (the sandbox), otherwise as the others."""
    queue = f"iris-bench-sandboxed-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client, task_queue=queue, workflows=[BareWorkflow, ParentWorkflow], activities=[bare_noop],
        max_concurrent_workflow_tasks=200,
    )  # fmt: skip
    async with worker:
        await client.execute_workflow(ParentWorkflow.run, id=f"{queue}-warmup", task_queue=queue)
        return await _pairs(client, queue, "pair", count, pids, settle)
