"""Names shared by the control plane, the worker agents and the client."""

from __future__ import annotations

SCHEDULER_WORKFLOW_ID = "iris-scheduler"
AUTOSCALER_WORKFLOW_ID = "iris-autoscaler"
CONTROL_TASK_QUEUE = "iris-control"
HEALTHY_WORKER_QUERY = "healthy_worker_count"
# workflow.patched id shared by the job and scheduler workflows: their hot-path signals go through
# the deliver_signals local activity instead of signal commands.
SIGNALS_BY_ACTIVITY = "signals-by-activity"

# Search attributes: the client lists jobs by them (one visibility call, no workflow queried) and the
# Temporal UI filters by them, e.g. `IrisKind = "Job" AND IrisJobState = "RUNNING"`.
KIND_ATTRIBUTE = "IrisKind"  # on every Iris workflow: one of the *_KIND values below
JOB_STATE_ATTRIBUTE = "IrisJobState"
JOB_NAME_ATTRIBUTE = "IrisJobName"
JOB_USER_ATTRIBUTE = "IrisUser"
JOB_TASKS_ATTRIBUTE = "IrisTasks"  # a job's task count, e.g. `IrisTasks > 1000`
# Keyword search attribute of every slice workflow (CREATING, READY, ...): the UI's fleet view.
SLICE_STATE_ATTRIBUTE = "IrisSliceState"
SEARCH_ATTRIBUTES: dict[str, str] = {
    KIND_ATTRIBUTE: "Keyword",
    JOB_STATE_ATTRIBUTE: "Keyword",
    JOB_NAME_ATTRIBUTE: "Keyword",
    JOB_USER_ATTRIBUTE: "Keyword",
    JOB_TASKS_ATTRIBUTE: "Int",
    SLICE_STATE_ATTRIBUTE: "Keyword",
}
"""Name -> Temporal type (`Keyword`, `Int`): the dev server's flags and the controller's registration."""
JOB_KIND, TASK_KIND, WORKER_KIND, SCHEDULER_KIND = "Job", "Task", "Worker", "Scheduler"
SLICE_KIND, AUTOSCALER_KIND = "Slice", "Autoscaler"
KINDS = (JOB_KIND, TASK_KIND, WORKER_KIND, SCHEDULER_KIND, SLICE_KIND, AUTOSCALER_KIND)
"""Every value IrisKind takes: the README's saved queries filter the Temporal UI by them."""


def worker_task_queue(worker_id: str) -> str:
    """Each worker agent polls its own queue, so a task only ever reaches the worker it was placed on."""
    return f"iris-worker-{worker_id}"


def worker_workflow_id(worker_id: str) -> str:
    return f"iris-worker-{worker_id}"


def task_workflow_id(job_id: str, task_index: int) -> str:
    return f"{job_id}/task-{task_index}"
