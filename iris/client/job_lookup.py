"""A job's workflow, looked up by id: the one place that turns "no such workflow" into "no such job"."""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError, RPCStatusCode

JOB_WORKFLOW_TYPE = "JobWorkflow"  # the name workflows/jobs/job_workflow.py registers; the client does not import it


def is_missing(err: RPCError) -> bool:
    """Whether Temporal answered that the workflow does not exist."""
    return err.status == RPCStatusCode.NOT_FOUND or "not found" in str(err).lower()


async def describe_job(temporal: Client, job_id: str) -> WorkflowExecutionDescription:
    """The job's workflow description; KeyError naming `job_id` when no job has that id.

    A workflow that is not a job (the scheduler, a task, a worker's session) is no job either: its id
    must not reach a job's reads, kill or ownership check.
    """
    if not isinstance(job_id, str) or not job_id or "\0" in job_id:
        raise KeyError(f"no such job: {job_id!r}")
    try:
        desc = await temporal.get_workflow_handle(job_id).describe()
    except RPCError as err:
        if is_missing(err):
            raise KeyError(f"no such job: {job_id}") from None
        raise
    if desc.workflow_type != JOB_WORKFLOW_TYPE:
        raise KeyError(f"no such job: {job_id} (it is Iris's {desc.workflow_type}, not a job)")
    return desc
