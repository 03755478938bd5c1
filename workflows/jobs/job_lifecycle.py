"""How a job behaves while its tasks run, as one transition table (pure: no Temporal, no I/O).

    ACTIVE ──fail──▶ FAILING            (a task failed for good past the budget, or was unschedulable)
      │ ▲ └──gang_broke──▶ GANG_BROKEN  (a member of a gang failed, lost its worker or was not picked up)
      │ └──────gang_retry───────┘       (every member stopped; budget left: the gang is placed again)
      └──kill──▶ KILLING ◀──kill── FAILING, GANG_BROKEN

The job's *state* (PENDING, RUNNING, SUCCEEDED, ...) is derived from its task counts
(`states.job_state_from_counts`); this phase says what the job does meanwhile: in every
phase but ACTIVE it starts no more tasks, hands nothing over to a new run and decides its
final state only once every task has stopped. `transition(phase, event)` returns the
next phase and the effects to perform, as data; JobWorkflow performs them. An event the
table has no entry for is a bug and fails the workflow task (InvalidTransition).
"""

from __future__ import annotations

from enum import StrEnum

from workflows.lifecycle import Step, transition_function


class JobPhase(StrEnum):
    ACTIVE = "ACTIVE"  # tasks are started, run and retried
    FAILING = "FAILING"  # the job failed: its running tasks are being cancelled
    GANG_BROKEN = "GANG_BROKEN"  # a gang attempt broke: its members are being cancelled, it may go again
    KILLING = "KILLING"  # the user (or Temporal) killed the job: every task is being cancelled


class JobEvent(StrEnum):
    FAIL = "fail"  # more tasks failed for good than max_task_failures allows, or one was unschedulable
    GANG_BROKE = "gang_broke"  # a gang member failed, lost its worker or was not picked up
    GANG_RETRY = "gang_retry"  # a broken gang's members all stopped and its budgets allow another attempt
    KILL = "kill"


class JobEffect(StrEnum):
    CANCEL_RUNNING = "cancel_running"  # cancel every task still running (each stops its process first)
    KEEP_CAUSE = "keep_cause"  # remember the result that broke the gang (its budgets are charged by it)
    RESET_TASKS = "reset_tasks"  # every row back to PENDING for the gang's next attempt


_P, _E, _X = JobPhase, JobEvent, JobEffect
TRANSITIONS: dict[tuple[JobPhase, JobEvent], Step[JobPhase, JobEffect]] = {
    (_P.ACTIVE, _E.FAIL): Step(_P.FAILING, (_X.CANCEL_RUNNING,)),
    (_P.ACTIVE, _E.GANG_BROKE): Step(_P.GANG_BROKEN, (_X.KEEP_CAUSE, _X.CANCEL_RUNNING)),
    (_P.ACTIVE, _E.KILL): Step(_P.KILLING, (_X.CANCEL_RUNNING,)),
    (_P.FAILING, _E.FAIL): Step(_P.FAILING),
    (_P.FAILING, _E.GANG_BROKE): Step(_P.FAILING),
    (_P.FAILING, _E.KILL): Step(_P.KILLING, (_X.CANCEL_RUNNING,)),
    (_P.GANG_BROKEN, _E.FAIL): Step(_P.GANG_BROKEN),  # a sibling's own failure while the gang winds down
    (_P.GANG_BROKEN, _E.GANG_BROKE): Step(_P.GANG_BROKEN),  # the first break is the cause
    (_P.GANG_BROKEN, _E.GANG_RETRY): Step(_P.ACTIVE, (_X.RESET_TASKS,)),
    (_P.GANG_BROKEN, _E.KILL): Step(_P.KILLING, (_X.CANCEL_RUNNING,)),
    (_P.KILLING, _E.FAIL): Step(_P.KILLING),
    (_P.KILLING, _E.GANG_BROKE): Step(_P.KILLING),
    (_P.KILLING, _E.KILL): Step(_P.KILLING),
}
"""Every legal move. KILLING absorbs everything: a killed job ends KILLED, whatever else happens."""


transition = transition_function(TRANSITIONS, "job in phase")
