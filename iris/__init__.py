"""Iris: durable multi-host accelerator jobs on Temporal. The public API."""

from iris.client import AsyncIrisClient, IrisClient, Job
from iris.reservations import ReservationStatus, ReservedWorker
from iris.teams import QueueRow
from iris.types import (
    Constraint,
    CoschedulingConfig,
    JobFailedError,
    JobInfo,
    JobState,
    JobStatus,
    ResourceSpec,
    SliceState,
    SliceStatus,
    TaskState,
    TaskStatus,
    TeamStatus,
    WorkerStatus,
    get_job_info,
)

__all__ = [
    "AsyncIrisClient",
    "Constraint",
    "CoschedulingConfig",
    "IrisClient",
    "Job",
    "JobFailedError",
    "JobInfo",
    "JobState",
    "JobStatus",
    "QueueRow",
    "ReservationStatus",
    "ReservedWorker",
    "ResourceSpec",
    "SliceState",
    "SliceStatus",
    "TaskState",
    "TaskStatus",
    "TeamStatus",
    "WorkerStatus",
    "get_job_info",
]
