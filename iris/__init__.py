"""Iris: durable multi-host accelerator jobs on Temporal. The public API."""

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from iris.import_hooks import after_import


def _log_to_stderr(structlog: ModuleType) -> None:
    """Iris's own log lines (a local cluster started, a job tree killed) go to stderr, never into the output of
    the program that imports it; a program that configures structlog decides itself (the CLI, the daemons)."""
    if not structlog.is_configured():
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))


# Configured when something imports structlog, not by importing it here: that costs ~90 ms of CPU, which a task
# reading its identity (`get_job_info`) paid for nothing (a second of wall time at 0.1 cpu).
after_import("structlog", _log_to_stderr)

if TYPE_CHECKING:
    from iris.auth.errors import AuthenticationError, PermissionDeniedError
    from iris.client.async_client import AsyncIrisClient
    from iris.client.iris_client import IrisClient, Job
    from iris.client.reservation_requests import ReservationStatus, ReservedWorker
    from iris.client.schedule_spec import ScheduleStatus
    from iris.client.views.team_tables import QueueRow
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

# What `from iris import X` gives, imported when first asked for (PEP 562): a task's `get_job_info` does not load
# the client and the Temporal SDK. Kept equal to `__all__` and the imports above (tests/test_import_cost.py).
_EXPORTS = {
    'AsyncIrisClient': 'iris.client.async_client',
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
    'QueueRow': 'iris.client.views.team_tables',
    'ReservationStatus': 'iris.client.reservation_requests',
    'ReservedWorker': 'iris.client.reservation_requests',
    'ResourceSpec': 'iris.types',
    'ScheduleStatus': 'iris.client.schedule_spec',
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
