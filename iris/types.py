"""The public value types of Iris; each validates itself at construction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from iris.units import MIN_MEMORY, parse_cpu, parse_memory
from scheduler.types import (
    ATTRIBUTE_KEY_RULE,
    INT32_MAX,
    Constraint,  # one value type for client and scheduler
    is_attribute_key,
)
from workflows.fleet.slice_lifecycle import SliceState
from workflows.states import TERMINAL_JOB_STATES, JobState, TaskState

__all__ = [
    "Constraint",
    "CoschedulingConfig",
    "JobFailedError",
    "JobInfo",
    "JobState",
    "JobStatus",
    "ResourceSpec",
    "SliceState",
    "SliceStatus",
    "TaskState",
    "TaskStatus",
    "UserStatus",
    "WorkerStatus",
    "get_job_info",
]


@dataclass(frozen=True)
class ResourceSpec:
    """Per-task resources and the number of tasks. `cpu` in cores (0.5 = half), `memory` like "2g"."""

    cpu: float | int | str = 1
    memory: str | int = "1g"
    gpus: int = 0
    tpu: str | None = None
    replicas: int = 1
    cpu_millis: int = field(init=False)
    memory_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_millis", parse_cpu(self.cpu, "resources.cpu"))
        object.__setattr__(self, "memory_bytes", parse_memory(self.memory, "resources.memory"))
        if 0 < self.memory_bytes < MIN_MEMORY:
            raise ValueError(f"resources.memory: must be 0 (no limit) or at least 1MiB, got {self.memory!r}")
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"resources.replicas must be an integer >= 1, got {self.replicas!r}")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 0:
            raise ValueError(f"resources.gpus must be an integer >= 0, got {self.gpus!r}")
        if self.gpus > INT32_MAX:  # an int32 on the wire
            raise ValueError(f"resources.gpus must be at most {INT32_MAX}, got {self.gpus}")
        if self.tpu is not None and (not isinstance(self.tpu, str) or not self.tpu):
            raise ValueError(f"resources.tpu must be a TPU variant like 'v5e-16', got {self.tpu!r}")


@dataclass(frozen=True)
class CoschedulingConfig:
    """Place every task of the job on workers that share one value of `group_by` (one TPU slice).

    With `num_groups` = k > 1 the tasks are split evenly over k distinct values (k slices, a
    multi-slice job): task i runs on host `i % hosts` of slice `i // hosts`, all placed at once.
    """

    group_by: str
    num_groups: int = 1

    def __post_init__(self) -> None:
        if not is_attribute_key(self.group_by):  # as a constraint's key: one no worker can have is refused
            raise ValueError(
                f"coscheduling.group_by must be an attribute name ({ATTRIBUTE_KEY_RULE}), got {self.group_by!r}"
            )
        if isinstance(self.num_groups, bool) or not isinstance(self.num_groups, int) or self.num_groups < 1:
            raise ValueError(f"coscheduling.num_groups must be an integer >= 1, got {self.num_groups!r}")


@dataclass(frozen=True)
class TaskStatus:
    task_index: int
    task_id: str
    state: TaskState
    worker_id: str
    attempt: int
    failure_count: int
    preemption_count: int
    exit_code: int | None
    error: str
    # The latest attempt's usage, all of its processes together; 0 until that attempt ends.
    peak_memory_bytes: int = 0
    cpu_seconds: float = 0.0
    duration_seconds: float = 0.0


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    name: str
    state: JobState
    num_tasks: int
    task_state_counts: dict[str, int]
    error: str
    pending_reason: str
    submitted_at: float
    finished_at: float | None
    # Every task's row by index; past 2,000 tasks the client reads them by range, and a job whose controller
    # does not answer gives only the rows of the tasks that did not succeed (its summary).
    tasks: tuple[TaskStatus, ...] = ()
    parent_job_id: str = ""  # the job whose task submitted this one; "" for a root job
    namespace: str = ""  # the namespace the job runs in (default: its user)
    user: str = ""
    priority: str = "interactive"  # the band asked for
    effective_priority: str = "interactive"  # the band the scheduler uses (batch: the user's credits are spent)
    preemptions: int = 0  # times the job's tasks were evicted for higher-band work (a gang's eviction counts once)
    after: tuple[str, ...] = ()  # the jobs it waits for, or waited for (`after=`)
    after_rule: str = ""  # "succeeded" | "ended" when it has dependencies
    max_concurrent: int = 0  # its cap on tasks placed at once (0 = none)
    team: str = ""  # the user's team (`sharing.teams`); "default" for a user in none
    queue_position: int | None = None  # 1 = placed next; None unless PENDING (and among the first 200 waiting)
    estimated_start: datetime | None = None  # UTC; None when Iris cannot say (estimate_basis says why)
    estimate_basis: str = ""  # how the estimate was made, in a sentence

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


@dataclass(frozen=True)
class TeamStatus:
    """One team as the scheduler publishes it; resources as dicts with the config's keys (cpu in cores,
    memory in bytes, gpus, tpu chips)."""

    team: str
    members: tuple[str, ...]
    quota: dict[str, float]
    used: dict[str, float]
    borrowed: dict[str, float]
    lent: dict[str, float]
    pending_jobs: int


@dataclass(frozen=True)
class UserStatus:
    """One user as the scheduler publishes it: credits left, credits spent, running tasks, pending jobs."""

    user: str
    credits: float
    used: float
    running_tasks: int
    pending_jobs: int


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    healthy: bool
    attributes: dict[str, str | int | float | bool]
    cpu: float
    memory_bytes: int
    running_tasks: tuple[str, ...]
    gpus: int = 0
    tpus: int = 0
    cordoned: bool = False  # no new work goes there (e.g. its slice is draining)


@dataclass(frozen=True)
class SliceStatus:
    """One slice of a scale group, as `list_slices` reads it from Temporal's visibility."""

    slice_id: str
    scale_group: str
    state: SliceState
    hosts: tuple[str, ...]
    worker_ids: tuple[str, ...]
    created_at: float
    error: str


class JobFailedError(RuntimeError):
    """A job ended FAILED, KILLED or UNSCHEDULABLE; `.status` has the details."""

    def __init__(self, status: JobStatus, message: str | None = None) -> None:
        self.status = status
        if message is None:
            detail = status.error or status.pending_reason
            message = f"job {status.job_id} {status.state}" + (f": {detail}" if detail else "")
            failed = [f"task {t.task_index}: {t.error}" for t in status.tasks if t.error and t.error not in detail]
            if failed:  # the failed tasks' own errors, a few of them, when the job's error does not say them
                more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
                message += "; " + "; ".join(failed[:5]) + more
        super().__init__(message)

    @property
    def task_errors(self) -> dict[int, str]:
        """The error of each task that has one, by task index."""
        return {t.task_index: t.error for t in self.status.tasks if t.error}


@dataclass(frozen=True)
class JobInfo:
    """Who this task is, inside a running task."""

    job_id: str
    task_id: str
    task_index: int
    num_tasks: int
    attempt: int
    worker_id: str
    namespace: str = ""  # IRIS_NAMESPACE
    parent_job_id: str = ""  # IRIS_PARENT_JOB_ID: "" for a root job


def get_job_info() -> JobInfo | None:
    """The current task's identity from its environment; None outside an Iris task."""
    env = os.environ
    if "IRIS_JOB_ID" not in env:
        return None
    return JobInfo(
        job_id=env["IRIS_JOB_ID"],
        task_id=env.get("IRIS_TASK_ID", ""),
        task_index=int(env.get("IRIS_TASK_INDEX", "0")),
        num_tasks=int(env.get("IRIS_NUM_TASKS", "1")),
        attempt=int(env.get("IRIS_ATTEMPT", "0")),
        worker_id=env.get("IRIS_WORKER_ID", ""),
        namespace=env.get("IRIS_NAMESPACE", ""),
        parent_job_id=env.get("IRIS_PARENT_JOB_ID", ""),
    )
