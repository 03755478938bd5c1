"""Iris's pure scheduler: worker snapshots and pending jobs in, a placement plan out.

No I/O, no clock, no Temporal: the control plane calls `find_assignments` from
an activity and commits the plan itself. Sharing a fleet (bands, credits, fair
share, preemption) is decided here too, from a `ShareSnapshot`; the credits
arithmetic the workflows hold durably is in `scheduler.accounting`; reservations (capacity a job holds
for its tree of child jobs) in `scheduler.reservations`. Submission-time checks
(`validate_constraints`, `validate_coscheduled_tpu`) live here too so that a
bad request fails at submit instead of pending forever.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Where each public name lives: imported on first use (PEP 562), so a process that needs one submodule
# (`scheduler.types`, for the client's and the agent's value types) does not load the whole scheduler.
_HOME = {
    "Accounts": "scheduler.accounting",
    "Assignment": "scheduler.types",
    "AttrValue": "scheduler.types",
    "BAND_RANK": "scheduler.types",
    "Band": "scheduler.types",
    "Charge": "scheduler.accounting",
    "Constraint": "scheduler.types",
    "DEFAULT_BAND": "scheduler.types",
    "DEFAULT_POLICY": "scheduler.placement",
    "DecayedUsage": "scheduler.accounting",
    "Eviction": "scheduler.types",
    "GroupHeadroom": "scheduler.sharing",
    "Ledger": "scheduler.accounting",
    "Op": "scheduler.types",
    "PendingJob": "scheduler.types",
    "Rates": "scheduler.accounting",
    "Reservation": "scheduler.reservations",
    "Resources": "scheduler.types",
    "RunningJob": "scheduler.sharing",
    "RunningTask": "scheduler.sharing",
    "SchedulingPolicy": "scheduler.placement",
    "SchedulingResult": "scheduler.types",
    "SharePolicy": "scheduler.sharing",
    "ShareSnapshot": "scheduler.sharing",
    "TAINT_PREFIX": "scheduler.types",
    "UserAccount": "scheduler.accounting",
    "WorkerSnapshot": "scheduler.types",
    "charge": "scheduler.accounting",
    "charge_all": "scheduler.accounting",
    "effective_band": "scheduler.sharing",
    "evaluate": "scheduler.attributes",
    "find_assignments": "scheduler.scheduling",
    "parse_band": "scheduler.types",
    "tpu_vm_count": "scheduler.tpu",
    "validate_constraints": "scheduler.attributes",
    "validate_coscheduled_tpu": "scheduler.tpu",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


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
