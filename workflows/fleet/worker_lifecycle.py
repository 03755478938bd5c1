"""A worker's lifecycle in the scheduler, as one transition table (pure: no Temporal, no I/O).

    READY ──dispatch_failed──▶ QUARANTINED ──quarantine_ended──▶ READY
      │  ▲                        │
      │  └──────registered────────┤   (a new agent session: a fresh entry, the operator's cordon kept)
      └──lost──▶ LOST ◀──lost─────┘
                  └──registered──▶ READY

A cordon is the operator's and orthogonal to this (a cordoned worker keeps its state and gets no new
work). `transition(state, event)` returns the next state and the effects to perform, as data; the
scheduler workflow (scheduler_registration) performs them. An event the table has no entry for is a
bug and fails the workflow task (InvalidTransition).
"""

from __future__ import annotations

from enum import StrEnum

from workflows.lifecycle import Step, transition_function


class WorkerState(StrEnum):
    READY = "READY"  # registered, its liveness session alive: it gets work unless cordoned
    QUARANTINED = "QUARANTINED"  # it did not pick up work it was given: none until its quarantine ends
    LOST = "LOST"  # its session ended: listed as unhealthy for a while, then removed


class WorkerEvent(StrEnum):
    REGISTERED = "registered"  # an agent session registered it (again)
    DISPATCH_FAILED = "dispatch_failed"  # a task placed on it was not picked up
    RAN_TASK = "ran_task"  # a task placed on it ran: it polls its queue
    QUARANTINE_ENDED = "quarantine_ended"  # its quarantine's time passed
    LOST = "lost"  # its liveness session ended


class WorkerEffect(StrEnum):
    RESET = "reset"  # a fresh entry from the registration (capacity, attributes, session); a cordon is kept
    QUARANTINE = "quarantine"  # count the failure; no work for 30 s, doubling with each count, at most 10 min
    FORGIVE = "forgive"  # its failure count starts again
    STAMP_LOST = "stamp_lost"  # remember when: it is removed LOST_RETENTION later


_S, _E, _X = WorkerState, WorkerEvent, WorkerEffect
TRANSITIONS: dict[tuple[WorkerState, WorkerEvent], Step[WorkerState, WorkerEffect]] = {
    (_S.READY, _E.REGISTERED): Step(_S.READY, (_X.RESET,)),
    (_S.READY, _E.DISPATCH_FAILED): Step(_S.QUARANTINED, (_X.QUARANTINE,)),
    (_S.READY, _E.RAN_TASK): Step(_S.READY, (_X.FORGIVE,)),
    (_S.READY, _E.LOST): Step(_S.LOST, (_X.STAMP_LOST,)),
    (_S.QUARANTINED, _E.REGISTERED): Step(_S.READY, (_X.RESET,)),
    # Tasks dispatched together time out together: failures inside one quarantine are one incident.
    (_S.QUARANTINED, _E.DISPATCH_FAILED): Step(_S.QUARANTINED),
    (_S.QUARANTINED, _E.RAN_TASK): Step(_S.QUARANTINED, (_X.FORGIVE,)),
    (_S.QUARANTINED, _E.QUARANTINE_ENDED): Step(_S.READY),
    (_S.QUARANTINED, _E.LOST): Step(_S.LOST, (_X.STAMP_LOST,)),
    (_S.LOST, _E.REGISTERED): Step(_S.READY, (_X.RESET,)),
    (_S.LOST, _E.DISPATCH_FAILED): Step(_S.LOST),  # a late report about a worker already gone
    (_S.LOST, _E.RAN_TASK): Step(_S.LOST),
    (_S.LOST, _E.LOST): Step(_S.LOST),  # reported twice: the first time counts
}
"""Every legal move."""


# No `coerce`: a row's state is a plain str, and a StrEnum member hashes and compares as its value, so the table
# finds it as it is (and an unknown one is an InvalidTransition naming it).
transition = transition_function(TRANSITIONS, "worker in state")
