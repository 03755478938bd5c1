"""Iris's pure scheduler: worker snapshots and pending jobs in, a placement plan out.

No I/O, no clock, no Temporal: the control plane calls `find_assignments` from
an activity and commits the plan itself. Sharing a fleet (bands, credits, fair
share, preemption) is decided here too, from a `ShareSnapshot`; the credits
arithmetic the workflows hold durably is in `scheduler.accounting`; reservations (capacity a job holds
for its tree of child jobs) in `scheduler.reservations`. Submission-time checks
(`validate_constraints`, `validate_coscheduled_tpu`) live here too so that a
bad request fails at submit instead of pending forever.
"""

from scheduler.accounting import Accounts, Charge, DecayedUsage, Ledger, Rates, UserAccount, charge, charge_all
from scheduler.attributes import evaluate, validate_constraints
from scheduler.placement import DEFAULT_POLICY, SchedulingPolicy
from scheduler.reservations import Reservation
from scheduler.scheduling import find_assignments
from scheduler.sharing import GroupHeadroom, RunningJob, RunningTask, SharePolicy, ShareSnapshot, effective_band
from scheduler.tpu import tpu_vm_count, validate_coscheduled_tpu
from scheduler.types import (
    BAND_RANK,
    DEFAULT_BAND,
    TAINT_PREFIX,
    Assignment,
    AttrValue,
    Band,
    Constraint,
    Eviction,
    Op,
    PendingJob,
    Resources,
    SchedulingResult,
    WorkerSnapshot,
    parse_band,
)

__all__ = [
    "BAND_RANK",
    "DEFAULT_BAND",
    "DEFAULT_POLICY",
    "TAINT_PREFIX",
    "Accounts",
    "Assignment",
    "AttrValue",
    "Band",
    "Charge",
    "Constraint",
    "DecayedUsage",
    "Eviction",
    "GroupHeadroom",
    "Ledger",
    "Op",
    "PendingJob",
    "Rates",
    "Reservation",
    "Resources",
    "RunningJob",
    "RunningTask",
    "SchedulingPolicy",
    "SchedulingResult",
    "SharePolicy",
    "ShareSnapshot",
    "UserAccount",
    "WorkerSnapshot",
    "charge",
    "charge_all",
    "effective_band",
    "evaluate",
    "find_assignments",
    "parse_band",
    "tpu_vm_count",
    "validate_constraints",
    "validate_coscheduled_tpu",
]
