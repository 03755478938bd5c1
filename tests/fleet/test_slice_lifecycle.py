"""The slice lifecycle table: every state is reachable, every live state has a way out, failures clean up."""

from __future__ import annotations

import pytest

from workflows.fleet.slice_lifecycle import (
    TERMINAL_SLICE_STATES,
    TRANSITIONS,
    Effect,
    SliceEvent,
    SliceState,
    transition,
)
from workflows.lifecycle import InvalidTransition

LIVE = [s for s in SliceState if s not in TERMINAL_SLICE_STATES]


@pytest.mark.parametrize("state", LIVE)
def test_every_live_state_has_a_way_out_to_a_terminal_state(state: SliceState) -> None:
    """From every non-terminal state some sequence of events reaches FAILED or TERMINATED."""
    seen, frontier = {state}, [state]
    while frontier:
        current = frontier.pop()
        for (src, _), step in TRANSITIONS.items():
            if src == current and step.next not in seen:
                seen.add(step.next)
                frontier.append(step.next)
    assert seen & TERMINAL_SLICE_STATES, f"{state} cannot end"


@pytest.mark.parametrize("state", LIVE)
def test_every_live_state_can_fail_or_be_scaled_down(state: SliceState) -> None:
    """A slice can always be asked to go (scale-down) or fail, whatever it is doing."""
    events = {event for (src, event) in TRANSITIONS if src == state}
    assert events & {SliceEvent.SCALE_DOWN, SliceEvent.ERROR, SliceEvent.DRAINED}, state


def test_terminal_states_take_no_event() -> None:
    """FAILED and TERMINATED are final: the table has nothing leaving them."""
    assert not [key for key in TRANSITIONS if key[0] in TERMINAL_SLICE_STATES]
    with pytest.raises(InvalidTransition, match="TERMINATED cannot take event scale_down"):
        transition(SliceState.TERMINATED, SliceEvent.SCALE_DOWN)


def test_every_state_is_reachable_from_creating() -> None:
    """No state in the enum is dead code: each is reached from CREATING."""
    seen, frontier = {SliceState.CREATING}, [SliceState.CREATING]
    while frontier:
        current = frontier.pop()
        for (src, _), step in TRANSITIONS.items():
            if src == current and step.next not in seen:
                seen.add(step.next)
                frontier.append(step.next)
    assert set(SliceState) == seen


@pytest.mark.parametrize(("key", "step"), [(k, v) for k, v in TRANSITIONS.items() if v.next == SliceState.FAILED])
def test_failing_always_terminates_the_slice_and_removes_its_workers(key: object, step: object) -> None:
    """The FAILED safety net: whatever failed, the platform is told to terminate and the scheduler forgets it."""
    assert (Effect.TERMINATE, Effect.REMOVE_WORKERS) == step.effects  # type: ignore[attr-defined]


def test_the_happy_path_and_scale_down() -> None:
    """CREATING -> BOOTSTRAPPING -> READY -> DRAINING -> TERMINATED, cordoning before the drain."""
    path = [SliceEvent.CREATED, SliceEvent.REGISTERED, SliceEvent.SCALE_DOWN, SliceEvent.DRAINED]
    state, effects = SliceState.CREATING, []
    for event in path:
        step = transition(state, event)
        state = step.next
        effects.extend(step.effects)
    assert SliceState.TERMINATED == state
    assert [Effect.BOOTSTRAP, Effect.WATCH, Effect.CORDON, Effect.DRAIN, Effect.TERMINATE,
            Effect.REMOVE_WORKERS] == effects  # fmt: skip


def test_a_busy_slice_stays_ready_and_keeps_being_watched() -> None:
    """An idle-only scale-down that finds work leaves the slice READY; nothing is cordoned or terminated."""
    step = transition(SliceState.READY, SliceEvent.BUSY)
    assert SliceState.READY == step.next
    assert (Effect.WATCH,) == step.effects
    for state in LIVE:
        if state != SliceState.READY:
            with pytest.raises(InvalidTransition):
                transition(state, SliceEvent.BUSY)
