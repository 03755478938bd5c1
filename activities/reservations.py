"""Which reserving jobs have ended without telling the scheduler (terminated from outside, say).

A job releases its reservation as it ends; a job terminated by hand (the Temporal UI, `temporal
workflow terminate`) cannot, so the scheduler asks now and then about the jobs it holds
reservations for and releases those of jobs that no longer run.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import FIND_ENDED_JOBS
from activities.heartbeat import heartbeating

MAX_IN_FLIGHT = 16


@activity.defn(name=FIND_ENDED_JOBS)
async def find_ended_jobs(job_ids: list[str]) -> list[str]:
    """The jobs among `job_ids` whose workflow is closed or unknown (one describe each)."""
    client = activity.client()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def ended(job_id: str) -> bool:
        async with gate:
            try:
                description = await client.get_workflow_handle(job_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return True
                raise
            return description.status != WorkflowExecutionStatus.RUNNING

    found = await heartbeating(asyncio.gather(*(ended(job_id) for job_id in job_ids)))
    return [job_id for job_id, gone in zip(job_ids, found, strict=True) if gone]
