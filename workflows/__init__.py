"""Deterministic Temporal workflows: orchestration only, no I/O."""

from workflows.job_workflow import JobWorkflow
from workflows.scheduler_workflow import SchedulerWorkflow
from workflows.task_workflow import TaskWorkflow
from workflows.worker_workflow import WorkerWorkflow

ALL_WORKFLOWS = [JobWorkflow, TaskWorkflow, SchedulerWorkflow, WorkerWorkflow]

__all__ = ["ALL_WORKFLOWS", "JobWorkflow", "SchedulerWorkflow", "TaskWorkflow", "WorkerWorkflow"]
