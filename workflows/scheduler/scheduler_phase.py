"""A scheduler run's phases, as one transition table (pure: no Temporal, no I/O).

    STARTING ──carried──▶ SERVING ──run_should_end──▶ CLOSING ──let_go──▶ HANDED_OVER
        │                  ▲                            ▲  ⟲ stale
        └──empty──▶ REBUILDING (rebuilt)                │
                         └──────────run_should_end──────┘

A carried state is loaded whole in the run's constructor (one parse of its messages: scheduler_carry).

What each phase allows:
- REBUILDING: a run that started with no state asks the live workers and tasks to report
  (activities.recovery) and makes no pass until they have, or REBUILD_GRACE passed.
- SERVING: passes, signals as they come.
- CLOSING: the run continues as new: no pass; the signals still held are applied, then the state is packed, and
  the run lets it go on its next wake if nothing came in (a short task: the server refuses a close when anything
  came in during the task that closes). What came in between (`stale`) is applied and the state packed again.
- HANDED_OVER: the state is packed and let go; a query that still reaches the run answers the counts handed
  over, or is refused (an Iris client asks again, and reaches the next run).

`transition(phase, event)` returns the next phase and the effects the workflow performs on the way, as
data; the scheduler workflow performs them. An event the table has no entry for is a bug and fails the
workflow task (InvalidTransition).
"""

from __future__ import annotations

from enum import StrEnum

from workflows.lifecycle import Step, transition_function


class SchedulerPhase(StrEnum):
    STARTING = "STARTING"  # the run's constructor, before it knows what it was handed
    REBUILDING = "REBUILDING"
    SERVING = "SERVING"
    CLOSING = "CLOSING"
    HANDED_OVER = "HANDED_OVER"


class SchedulerEvent(StrEnum):
    CARRIED = "carried"  # handed a state: loaded whole
    EMPTY = "empty"  # handed nothing: a terminated scheduler came back, or the first run
    REBUILT = "rebuilt"  # the fleet has reported (or the grace passed, or it could not be asked)
    RUN_SHOULD_END = "run_should_end"  # long history, signal budget spent, or another build current
    STALE = "stale"  # signals came in after the pack: it no longer holds them
    LET_GO = "let_go"  # packed: the state goes to the next run


class SchedulerEffect(StrEnum):
    ASK_FLEET = "ask_fleet"  # start the rebuild activity: live workers and tasks report again
    PACK = "pack"  # apply the signals still held, then pack the state
    CONTINUE_AS_NEW = "continue_as_new"  # drop the state and continue as new with what was packed


_P, _E, _X = SchedulerPhase, SchedulerEvent, SchedulerEffect
TRANSITIONS: dict[tuple[SchedulerPhase, SchedulerEvent], Step[SchedulerPhase, SchedulerEffect]] = {
    (_P.STARTING, _E.CARRIED): Step(_P.SERVING),
    (_P.STARTING, _E.EMPTY): Step(_P.REBUILDING, (_X.ASK_FLEET,)),
    (_P.REBUILDING, _E.REBUILT): Step(_P.SERVING),
    (_P.REBUILDING, _E.RUN_SHOULD_END): Step(_P.CLOSING, (_X.PACK,)),  # reports still due go to the next run
    (_P.SERVING, _E.RUN_SHOULD_END): Step(_P.CLOSING, (_X.PACK,)),
    (_P.CLOSING, _E.STALE): Step(_P.CLOSING, (_X.PACK,)),
    (_P.CLOSING, _E.LET_GO): Step(_P.HANDED_OVER, (_X.CONTINUE_AS_NEW,)),
}
"""Every legal move."""


transition = transition_function(TRANSITIONS, "scheduler in phase", SchedulerPhase)
