"""The control plane of `python -m benchmarks scale`: the real scheduler, with task signals counted, not sent.

The scale bench has no job or task workflows (100,000 of them would measure the
dev server, not the scheduler), so `assigned`/`unschedulable` signals to tasks
are accepted here without an RPC; every other signal (the answers to
registrations) goes out through the real `deliver_signals`. Everything else is
the controller's own worker: the same workflows, sandbox and scheduling activity.
Run as `python -m benchmarks.scale_controller ADDRESS [TIMINGS]` so its memory is its own; with TIMINGS (a
file), it writes there the CPU time of the scheduler's longest activations when it stops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import sys
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.worker import Worker

from activities.contracts import CONTROL_TASK_QUEUE, DELIVER_ASSIGNMENTS, DELIVER_SIGNALS, Delivery, DeliveryOutcome
from activities.contracts.announcing import AssignmentBatch
from activities.pass_pool import pass_process
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_signals
from benchmarks.activation_timing import TimedRunner, Timings
from iris.connection import connect_client
from iris.controller.control_plane import controller_runner, ensure_scheduler
from iris.controller.gc_tuning import tune_for_controller
from iris.deploy.worker_versioning import build_id, deployment_config, promote
from workflows.fleet.registrar_workflow import RegistrarWorkflow
from workflows.fleet.worker_workflow import WorkerWorkflow
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

TASK_SIGNALS = ("assigned", "unschedulable")
BUILD = build_id()


@activity.defn(name=DELIVER_SIGNALS)
async def deliver_or_count(deliveries: list[Delivery], report_sent: bool = False) -> list[int] | dict[str, Any]:
    """Signals to (absent) task workflows count as delivered; the rest are really sent."""
    typed = [d if isinstance(d, Delivery) else Delivery(**d) for d in deliveries]
    real = [(i, d) for i, d in enumerate(typed) if d.signal not in TASK_SIGNALS]
    sent = await deliver_signals([d for _, d in real]) if real else []
    gone = [real[i][0] for i in sent if isinstance(i, int)] if isinstance(sent, list) else []
    return {"gone": gone, "sent": len(typed)} if report_sent else gone


@activity.defn(name=DELIVER_ASSIGNMENTS)
async def assignments_or_count(deliveries: AssignmentBatch, patience: float) -> DeliveryOutcome:
    """The scheduler's announcements, as `deliver_or_count` treats them: none gone, none late."""
    gone = await deliver_or_count(deliveries.deliveries())
    return DeliveryOutcome(gone=gone if isinstance(gone, list) else gone["gone"])


async def serve(address: str, timings_path: Path | None = None) -> None:
    tune_for_controller()  # as `iris controller serve` does
    client = await connect_client(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    timings = Timings()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor, pass_process():
        worker = Worker(
            client,
            task_queue=CONTROL_TASK_QUEUE,
            workflows=[SchedulerWorkflow, WorkerWorkflow, RegistrarWorkflow],
            activities=[find_assignments_activity, deliver_or_count, assignments_or_count, rebuild_scheduler],
            activity_executor=executor,
            max_concurrent_workflow_tasks=200,
            workflow_runner=TimedRunner(controller_runner(), "SchedulerWorkflow", timings),  # as a controller runs them
            deployment_config=deployment_config(BUILD),
        )
        async with worker:
            await promote(client, BUILD)
            await ensure_scheduler(client, "memory://bench")
            print("ready", flush=True)
            await stop.wait()
    if timings_path is not None:
        timings.write(timings_path)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else None))
