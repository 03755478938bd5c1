"""Iris: durable multi-host accelerator jobs on Temporal. The public API."""

import importlib
import sys
from typing import TYPE_CHECKING, Any

import structlog

if not structlog.is_configured():
    # Iris's own log lines (a local cluster started, a job tree killed) go to stderr, never into the output of
    # the program that imports it; a program that configures structlog decides itself (the CLI, the daemons).
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))

if TYPE_CHECKING:
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

# What `from iris import X` gives, imported when first asked for: `iris --help`, a daemon's start and a task's
# `get_job_info` do not load the client and the Temporal SDK (PEP 562).
_EXPORTS = {
    'AsyncIrisClient': 'iris.client.iris_client',
    'AuthenticationError': 'iris.auth.errors',
    'Constraint': 'iris.types',
    'CoschedulingConfig': 'iris.types',
    'IrisClient': 'iris.client.iris_client',
    'Job': 'iris.client.iris_client',
    'JobFailedError': 'iris.types',
    'JobInfo': 'iris.types',
    'JobState': 'iris.types',
    'JobStatus': 'iris.types',
    'PermissionDeniedError': 'iris.auth.errors',
    'PreemptionNotice': 'iris.preemption',
    'QueueRow': 'iris.client.team_tables',
    'ReservationStatus': 'iris.client.reservation_requests',
    'ReservedWorker': 'iris.client.reservation_requests',
    'ResourceSpec': 'iris.types',
    'ScheduleStatus': 'iris.client.schedules',
    'SliceState': 'iris.types',
    'SliceStatus': 'iris.types',
    'TaskState': 'iris.types',
    'TaskStatus': 'iris.types',
    'TeamStatus': 'iris.types',
    'WorkerStatus': 'iris.types',
    'get_job_info': 'iris.types',
    'preemption_notice': 'iris.preemption',
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'iris' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
