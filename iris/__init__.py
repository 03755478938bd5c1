"""Iris: durable multi-host accelerator jobs on Temporal. The public API."""

import sys

import structlog

if not structlog.is_configured():
    # Iris's own log lines (a local cluster started, a job tree killed) go to stderr, never into the output of
    # the program that imports it; a program that configures structlog decides itself (the CLI, the daemons).
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))

from iris.auth.errors import AuthenticationError, PermissionDeniedError
from iris.client.iris_client import AsyncIrisClient, IrisClient, Job
from iris.client.reservation_requests import ReservationStatus, ReservedWorker
from iris.client.schedules import ScheduleStatus
from iris.client.team_tables import QueueRow
from iris.preemption import PreemptionNotice, preemption_notice
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
    "AuthenticationError",
    "Constraint",
    "CoschedulingConfig",
    "IrisClient",
    "Job",
    "JobFailedError",
    "JobInfo",
    "JobState",
    "JobStatus",
    "PermissionDeniedError",
    "PreemptionNotice",
    "QueueRow",
    "ReservationStatus",
    "ReservedWorker",
    "ResourceSpec",
    "ScheduleStatus",
    "SliceState",
    "SliceStatus",
    "TaskState",
    "TaskStatus",
    "TeamStatus",
    "WorkerStatus",
    "get_job_info",
    "preemption_notice",
]
