"""The raw baseline: a bare Temporal workflow with one no-op activity, on the same dev server as Iris.

Next to it, the same bare workflow run as the child of a bare parent: the shape of an
Iris job (a job workflow with one child workflow per task) with none of Iris's work in it
(no scheduler, no signals). Its rate is the ceiling that shape allows on this server.

Both run on an unsandboxed in-process worker (they import nothing and do nothing
non-deterministic), so this module needs no sandbox-safe imports.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from iris.bench.figures import WARMUP_SAMPLES, Latency, Throughput, timed_gather
from iris.bench.history import count_histories

BARE_ACTIVITY = "iris_bench_noop"
BARE_WORKFLOW = "IrisBenchBare"
PARENT_WORKFLOW = "IrisBenchParent"


@activity.defn(name=BARE_ACTIVITY)
async def bare_noop() -> float:
    """The raw baseline's only activity: return the wall-clock time at which it began."""
    return time.time()


@workflow.defn(name=BARE_WORKFLOW)
class BareWorkflow:
    """A bare workflow that executes one no-op activity and returns the activity's start time."""

    @workflow.run
    async def run(self) -> float:
        """Run the activity with default retries; the result is its `time.time()` at start."""
        result: float = await workflow.execute_activity(bare_noop, start_to_close_timeout=timedelta(seconds=30))
        return result


@workflow.defn(name=PARENT_WORKFLOW)
class ParentWorkflow:
    """A bare parent that runs one `BareWorkflow` as its child: an Iris job's shape, without Iris."""

    @workflow.run
    async def run(self) -> float:
        """Start the child, wait for it, return its result."""
        result: float = await workflow.execute_child_workflow(
            BareWorkflow.run, id=f"{workflow.info().workflow_id}/child"
        )
        return result


@dataclass(frozen=True)
class RawFigures:
    """The bare dev server's figures: start->activity and start->result latency, and throughput.

    `parent_child` is the throughput of bare parent + child pairs, measured right after.
    """

    latency: Latency
    done: Latency
    throughput: Throughput
    parent_child: Throughput


async def measure_raw(client: Client, samples: int, count: int, pids: Mapping[str, int]) -> RawFigures:
    """The bare dev server: sequential start-to-activity latency, then `count` workflows at once.

    The worker runs unsandboxed: the bare workflow imports nothing and does nothing
    non-deterministic, and the baseline should be the engine, not the Python sandbox.
    """
    queue = f"iris-bench-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BareWorkflow, ParentWorkflow],
        activities=[bare_noop],
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

        async def start_parent(i: int) -> Any:
            return await client.start_workflow(ParentWorkflow.run, id=f"{queue}-pair-{i}", task_queue=queue)

        async def finish(handle: Any) -> object:
            result: object = await handle.result()
            return result

        throughput, handles = await timed_gather(count, start, finish, pids)
        parent_child, parents = await timed_gather(count, start_parent, finish, pids)
    throughput.add_history(await count_histories(client, {"bare": [h.id for h in handles]}))
    parent_child.add_history(
        await count_histories(
            client, {"parent": [h.id for h in parents], "child": [f"{h.id}/child" for h in parents]}
        )
    )
    return RawFigures(
        latency=Latency(tuple(p[0] for p in pairs)),
        done=Latency(tuple(p[1] for p in pairs)),
        throughput=throughput,
        parent_child=parent_child,
    )
