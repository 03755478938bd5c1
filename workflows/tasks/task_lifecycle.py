"""A task's lifecycle as one transition table (pure: no Temporal, no I/O).

    PENDING ──assigned──▶ ASSIGNED ──started──▶ RUNNING ──succeeded──▶ SUCCEEDED
       │  ▲                  │ │                  │
       │  └─dispatch_failed──┘ └──────┬───────────┤──failed──▶ FAILED ──retry──▶ PENDING
       │                              │           └──worker_lost──▶ WORKER_FAILED ──retry──▶ PENDING
       │                              └──evicted (from ASSIGNED or RUNNING)──▶ WORKER_FAILED
       ├──timed_out──▶ UNSCHEDULABLE  │
       └──killed──▶ KILLED ◀──killed──┘

`transition(state, event)` returns the next state and the side effects to perform, as
data; TaskWorkflow performs them. An event the table has no entry for is a bug in the
workflow and fails its workflow task loudly (InvalidTransition).
"""

from __future__ import annotations

from enum import StrEnum

from workflows.lifecycle import Step, transition_function
from workflows.states import TERMINAL_TASK_STATES, TaskState


class TaskEvent(StrEnum):
    ASSIGNED = "assigned"  # the scheduler committed capacity on a worker
    STARTED = "started"  # the worker agent started the process
    DISPATCH_FAILED = "dispatch_failed"  # the worker never picked the task up (or lost it before it started)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the task's own fault (non-zero exit, exception)
    WORKER_LOST = "worker_lost"  # heartbeats stopped: the worker died or was preempted
    EVICTED = "evicted"  # the scheduler stopped it for higher-band work: a preemption, not a failure
    RETRY = "retry"  # budget left: back to the queue
    KILLED = "killed"  # its job cancelled it
    TIMED_OUT = "timed_out"  # the scheduling timeout passed while pending


class TaskEffect(StrEnum):
    RELEASE = "release"  # give the attempt's place back to the scheduler (unless the agent did)
    ENQUEUE = "enqueue"  # ask the scheduler for a place for the next attempt
    COUNT_FAILURE = "count_failure"  # spend one of the failure budget
    COUNT_PREEMPTION = "count_preemption"  # spend one of the preemption budget
    TELL_JOB = "tell_job"  # the job's table shows the task pending again (task_retrying)


_S, _E, _X = TaskState, TaskEvent, TaskEffect
TRANSITIONS: dict[tuple[TaskState, TaskEvent], Step[TaskState, TaskEffect]] = {
    (_S.PENDING, _E.ASSIGNED): Step(_S.ASSIGNED),
    (_S.PENDING, _E.KILLED): Step(_S.KILLED, (_X.RELEASE,)),
    (_S.PENDING, _E.TIMED_OUT): Step(_S.UNSCHEDULABLE),
    (_S.ASSIGNED, _E.STARTED): Step(_S.RUNNING),
    (_S.ASSIGNED, _E.DISPATCH_FAILED): Step(_S.PENDING, (_X.RELEASE, _X.ENQUEUE)),
    (_S.ASSIGNED, _E.SUCCEEDED): Step(_S.SUCCEEDED, (_X.RELEASE,)),
    (_S.ASSIGNED, _E.FAILED): Step(_S.FAILED, (_X.RELEASE, _X.COUNT_FAILURE)),
    (_S.ASSIGNED, _E.WORKER_LOST): Step(_S.WORKER_FAILED, (_X.RELEASE, _X.COUNT_PREEMPTION)),
    (_S.ASSIGNED, _E.KILLED): Step(_S.KILLED, (_X.RELEASE,)),
    (_S.ASSIGNED, _E.EVICTED): Step(_S.WORKER_FAILED, (_X.RELEASE, _X.COUNT_PREEMPTION)),
    (_S.RUNNING, _E.SUCCEEDED): Step(_S.SUCCEEDED, (_X.RELEASE,)),
    (_S.RUNNING, _E.FAILED): Step(_S.FAILED, (_X.RELEASE, _X.COUNT_FAILURE)),
    (_S.RUNNING, _E.WORKER_LOST): Step(_S.WORKER_FAILED, (_X.RELEASE, _X.COUNT_PREEMPTION)),
    (_S.RUNNING, _E.KILLED): Step(_S.KILLED, (_X.RELEASE,)),
    (_S.RUNNING, _E.EVICTED): Step(_S.WORKER_FAILED, (_X.RELEASE, _X.COUNT_PREEMPTION)),
    (_S.FAILED, _E.RETRY): Step(_S.PENDING, (_X.TELL_JOB, _X.ENQUEUE)),
    (_S.FAILED, _E.KILLED): Step(_S.KILLED, (_X.RELEASE,)),  # killed on its way to the next attempt
    (_S.WORKER_FAILED, _E.RETRY): Step(_S.PENDING, (_X.TELL_JOB, _X.ENQUEUE)),
    (_S.WORKER_FAILED, _E.KILLED): Step(_S.KILLED, (_X.RELEASE,)),
}
"""Every legal move. A gang member's DISPATCH_FAILED ends its run instead of enqueueing (its job
re-places the whole gang): the workflow skips ENQUEUE for it."""

# Never killed: a task that ended for good stays as it ended when its job's cancellation comes late.
UNKILLABLE = TERMINAL_TASK_STATES - {TaskState.FAILED, TaskState.WORKER_FAILED}


transition = transition_function(TRANSITIONS, "task in state")
