"""Deterministic Temporal workflows: orchestration only, no I/O."""

from workflows.autoscaler_workflow import AutoscalerWorkflow
from workflows.job_workflow import JobWorkflow
from workflows.scheduler_workflow import SchedulerWorkflow
from workflows.slice_workflow import SliceWorkflow
from workflows.task_workflow import TaskWorkflow
from workflows.worker_workflow import WorkerWorkflow

ALL_WORKFLOWS = [JobWorkflow, TaskWorkflow, SchedulerWorkflow, WorkerWorkflow, SliceWorkflow, AutoscalerWorkflow]

__all__ = [
    "ALL_WORKFLOWS",
    "AutoscalerWorkflow",
    "JobWorkflow",
    "SchedulerWorkflow",
    "SliceWorkflow",
    "TaskWorkflow",
    "WorkerWorkflow",
]
