"""The use so far of a job's running tasks, read from their attempts' last heartbeats.

While a task runs, its agent heartbeats every second with what the attempt has used so far
(worker_agent.usage); the task workflow's pending `run_task` activity holds the last of those
details, so one describe per running task reads them. Bounded to MAX_TASKS tasks a call, so a
summary of a huge job does not describe thousands of workflows.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from activities.contracts import RUN_TASK, task_workflow_id

if TYPE_CHECKING:  # the SDK is the caller's (a Temporal client's): `iris job summary` in team mode loads none
    from temporalio.client import Client

__all__ = ["MAX_TASKS", "Usage", "live_usage"]

MAX_TASKS = 200

Usage = tuple[int, float, float]
"""(peak memory bytes, CPU seconds, seconds run) of one attempt so far."""


async def _one(client: Client, job_id: str, index: int) -> Usage | None:
    with contextlib.suppress(Exception):  # ended meanwhile, not started, or an older agent: no figures
        desc = await client.get_workflow_handle(task_workflow_id(job_id, index)).describe()
        for pending in desc.raw_description.pending_activities:
            if pending.activity_type.name != RUN_TASK or not pending.heartbeat_details.payloads:
                continue
            details: list[Any] = await client.data_converter.decode(pending.heartbeat_details.payloads)
            for detail in details:
                if isinstance(detail, dict) and "peak_memory_bytes" in detail:
                    return int(detail["peak_memory_bytes"]), float(detail["cpu_seconds"]), float(detail["run_seconds"])
    return None


async def live_usage(client: Client, job_id: str, indices: list[int]) -> dict[int, Usage]:
    """Usage so far of the tasks `indices` (at most MAX_TASKS of them) that are running and report it."""
    chosen = indices[:MAX_TASKS]
    found = await asyncio.gather(*(_one(client, job_id, i) for i in chosen))
    return {i: usage for i, usage in zip(chosen, found, strict=True) if usage is not None}
