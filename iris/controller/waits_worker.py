"""The controller's worker for long waits (a job's dependencies), apart from the control worker.

A dependency's `await_job` activity runs as long as the job it waits for: hours. On the control worker
each would hold one of its activity slots, and a few hundred waiting jobs would leave none for the
scheduler's passes. So they run on their own task queue with their own, much larger, slot count; an
activity that only awaits a long poll costs a coroutine, not a thread.
"""

from __future__ import annotations

import asyncio

import structlog
from temporalio.client import Client
from temporalio.worker import Worker

from activities.contracts import UNVERSIONED_BUILD_ID, WAIT_TASK_QUEUE
from activities.dependencies import await_job

log = structlog.get_logger("iris.controller.control_plane")

MAX_WAITS = 10_000
"""Dependencies one controller waits on at once (each an idle coroutine and a long poll)."""


def wait_worker(client: Client) -> Worker:
    """The worker of the long-waiting activities (unversioned: an activity on another queue is not pinned)."""
    return Worker(client, task_queue=WAIT_TASK_QUEUE, activities=[await_job], max_concurrent_activities=MAX_WAITS,
                  build_id=UNVERSIONED_BUILD_ID)  # not the SDK's default: a digest of every loaded module, each start


async def serve_waits(client: Client, stop: asyncio.Event) -> None:
    """Run the wait worker until `stop` is set; a worker that fails (Temporal away) is replaced."""
    while not stop.is_set():
        worker = wait_worker(client)
        running = asyncio.create_task(worker.run())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({stopping, running}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not running.done():
            await worker.shutdown()
        try:
            await running
        except Exception as err:
            log.warning("wait_worker_failed", error=str(err))
            await asyncio.sleep(1.0)
