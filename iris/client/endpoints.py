"""Endpoints: the named ports of a job's running tasks, as the job publishes them in its memo.

Read through one describe of the job's workflow (visibility), never a query: a hundred clients
resolving a service's address must not become queries against the job or the scheduler.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionStatus

from iris.client.job_lookup import describe_job
from workflows.visibility import JobView


async def job_endpoints(temporal: Client, job_id: str) -> dict[str, dict[int, str]]:
    """Port name -> task index -> "host:port" of the job's running tasks; {} once the job has ended.

    KeyError for an unknown job.
    """
    desc = await describe_job(temporal, job_id)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return {}  # ended (even if terminated from outside, when its memo could not be cleared)
    view = JobView.from_memo(await desc.memo())
    return {name: {int(i): a for i, a in by_task.items()} for name, by_task in view.endpoints.items()}


async def resolve(temporal: Client, job_id: str, name: str) -> list[str]:
    """The "host:port" of port `name` of each running task of the job, by task index ([] when none runs)."""
    by_task = (await job_endpoints(temporal, job_id)).get(name, {})
    return [by_task[i] for i in sorted(by_task)]
