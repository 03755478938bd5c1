"""A slice's lifecycle as one transition table (pure: no Temporal, no I/O).

    CREATING ──created──▶ BOOTSTRAPPING ──registered──▶ READY ──scale_down──▶ DRAINING ──drained──▶ TERMINATED
       │                      │                          │ ▲ │
       └──error──▶ FAILED ◀───┴──error                   │ └─┴─busy: an idle-only scale-down found work on it
                                                         └──lost (preempted / gone)──▶ FAILED

`transition(state, event)` looks the pair up and returns the next state and the
side effects to perform, as data; SliceWorkflow performs them. FAILED always
terminates the slice (a safety net: a platform that failed half-way may have left
something behind) and removes its workers from the scheduler.
"""

from __future__ import annotations

from enum import StrEnum

from workflows.lifecycle import Step, transition_function


class SliceState(StrEnum):
    """Where a slice is in its life; also its `IrisSliceState` search attribute."""

    CREATING = "CREATING"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    READY = "READY"
    FAILED = "FAILED"
    DRAINING = "DRAINING"
    TERMINATED = "TERMINATED"


TERMINAL_SLICE_STATES = frozenset({SliceState.FAILED, SliceState.TERMINATED})


class SliceEvent(StrEnum):
    CREATED = "created"  # the platform reports every host reachable
    REGISTERED = "registered"  # every host's agent is registered and healthy in the scheduler
    ERROR = "error"  # a step failed for good (quota, platform failure, bootstrap timeout)
    SCALE_DOWN = "scale_down"  # the autoscaler or a user asked for the slice to go
    LOST = "lost"  # a READY slice was preempted or vanished
    DRAINED = "drained"  # its workers run nothing more (or the drain timeout passed)
    BUSY = "busy"  # an idle-only scale-down found work placed on the slice: it stays


class Effect(StrEnum):
    BOOTSTRAP = "bootstrap"  # start the agents and wait for them to register
    WATCH = "watch"  # watch the platform until the slice is lost or scaled down
    CORDON = "cordon"  # tell the scheduler to place nothing more on the slice's workers
    DRAIN = "drain"  # wait until the slice's workers run no task (bounded by the drain timeout)
    TERMINATE = "terminate"  # delete the slice on its platform
    REMOVE_WORKERS = "remove_workers"  # the scheduler forgets the slice's workers


_GONE = (Effect.TERMINATE, Effect.REMOVE_WORKERS)

TRANSITIONS: dict[tuple[SliceState, SliceEvent], Step[SliceState, Effect]] = {
    (SliceState.CREATING, SliceEvent.CREATED): Step(SliceState.BOOTSTRAPPING, (Effect.BOOTSTRAP,)),
    (SliceState.CREATING, SliceEvent.ERROR): Step(SliceState.FAILED, _GONE),
    (SliceState.CREATING, SliceEvent.SCALE_DOWN): Step(SliceState.DRAINING),
    (SliceState.BOOTSTRAPPING, SliceEvent.REGISTERED): Step(SliceState.READY, (Effect.WATCH,)),
    (SliceState.BOOTSTRAPPING, SliceEvent.ERROR): Step(SliceState.FAILED, _GONE),
    (SliceState.BOOTSTRAPPING, SliceEvent.SCALE_DOWN): Step(SliceState.DRAINING, (Effect.CORDON,)),
    (SliceState.READY, SliceEvent.SCALE_DOWN): Step(SliceState.DRAINING, (Effect.CORDON, Effect.DRAIN)),
    (SliceState.READY, SliceEvent.BUSY): Step(SliceState.READY, (Effect.WATCH,)),
    (SliceState.READY, SliceEvent.LOST): Step(SliceState.FAILED, _GONE),
    (SliceState.READY, SliceEvent.ERROR): Step(SliceState.FAILED, _GONE),
    (SliceState.DRAINING, SliceEvent.DRAINED): Step(SliceState.TERMINATED, _GONE),
    (SliceState.DRAINING, SliceEvent.ERROR): Step(SliceState.FAILED, _GONE),
}


transition = transition_function(TRANSITIONS, "slice in state")
