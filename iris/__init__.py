"""Iris: durable multi-host accelerator jobs on Temporal. The public API."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _log_to_stderr(structlog: ModuleType) -> None:
    """Iris's own log lines (a local cluster started, a job tree killed) go to stderr, never into the output of
    the program that imports it; a program that configures structlog decides itself (the CLI, the daemons)."""
    if not structlog.is_configured():
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))


class _ConfiguredOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Applies `_log_to_stderr` the moment structlog is imported, as importing it here did: importing structlog
    costs ~90 ms of CPU, which a task reading its identity (`get_job_info`) paid for nothing (a second of wall
    time at 0.1 cpu). Removes itself once used."""

    def __init__(self) -> None:
        self._loader: importlib.abc.Loader | None = None

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "structlog":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self._loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        assert self._loader is not None
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert self._loader is not None
        self._loader.exec_module(module)
        _log_to_stderr(module)


if "structlog" in sys.modules:
    _log_to_stderr(sys.modules["structlog"])
elif not any(isinstance(finder, _ConfiguredOnImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _ConfiguredOnImport())

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

# What `from iris import X` gives, imported when first asked for (PEP 562): a task's `get_job_info` does not load
# the client and the Temporal SDK. Kept equal to `__all__` and the imports above (tests/test_import_cost.py).
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
