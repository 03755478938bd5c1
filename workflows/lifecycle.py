"""What the four lifecycle tables share (job, task, worker, slice): a step, the error, the lookup.

Each `*_lifecycle.py` declares its states, events, effects and its table of legal moves; this module
gives the table its behaviour, so a fifth lifecycle is a table and nothing else. Pure: no Temporal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

S = TypeVar("S")  # a state (or phase)
E = TypeVar("E")  # an event
X = TypeVar("X")  # an effect


@dataclass(frozen=True)
class Step(Generic[S, X]):
    """Where an event takes a state, and the effects the workflow performs on the way (data, not calls)."""

    next: S
    effects: tuple[X, ...] = ()


class InvalidTransition(ValueError):  # noqa: N818 - reads as the outcome it names
    """An event that the table has no entry for in this state: a bug in the workflow (it fails the task)."""


def transition_function(
    table: Mapping[tuple[S, E], Step[S, X]], what: str, coerce: Callable[[S], S] | None = None
) -> Callable[[S, E], Step[S, X]]:
    """`transition(state, event)` over `table`: the step, or InvalidTransition saying "<what> <state> cannot
    take event <event>" (`what` is e.g. "job in phase"). `coerce` turns a stored value into a state first."""

    def transition(state: S, event: E) -> Step[S, X]:
        step = table.get((coerce(state) if coerce else state, event))
        if step is None:
            raise InvalidTransition(f"{what} {state} cannot take event {event}")
        return step

    return transition
