"""Iris's pure scheduler: worker snapshots and pending jobs in, a placement plan out.

No I/O, no clock, no Temporal: the control plane calls `find_assignments` from
an activity and commits the plan itself. Submission-time checks
(`validate_constraints`, `validate_coscheduled_tpu`) live here too so that a
bad request fails at submit instead of pending forever.
"""

from scheduler.attributes import evaluate, validate_constraints
from scheduler.placement import DEFAULT_POLICY, SchedulingPolicy
from scheduler.scheduling import find_assignments
from scheduler.tpu import tpu_vm_count, validate_coscheduled_tpu
from scheduler.types import (
    TAINT_PREFIX,
    Assignment,
    AttrValue,
    Constraint,
    Op,
    PendingJob,
    Resources,
    SchedulingResult,
    WorkerSnapshot,
)

__all__ = [
    "DEFAULT_POLICY",
    "TAINT_PREFIX",
    "Assignment",
    "AttrValue",
    "Constraint",
    "Op",
    "PendingJob",
    "Resources",
    "SchedulingPolicy",
    "SchedulingResult",
    "WorkerSnapshot",
    "evaluate",
    "find_assignments",
    "tpu_vm_count",
    "validate_constraints",
    "validate_coscheduled_tpu",
]
