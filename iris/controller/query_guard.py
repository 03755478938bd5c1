"""A worker interceptor that fails any query which changes its workflow's state.

Off in production; the test suite turns it on in every controller it starts (`IRIS_QUERY_GUARD=1`), so
each query any test makes is checked.

Queries are answered from whatever the worker holds, and a workflow the server asks while it holds no
cached run is replayed to answer: a query that changed state would make the next decisions differ from
those a replay makes, the class of bug that stopped the scheduler (docs/reliability.md, "Replays"). The
guard takes a fingerprint of the workflow instance before and after each query and raises on a difference.
A handler may keep a cache of its own answer: such attributes are listed in the class's `QUERY_CACHES`, by
their path from the instance (`"core.snapshot"`: the `snapshot` of the object in its `core`).
A value may keep what it computes from its own data (a worker's attributes, decoded from its row when
first read): such attributes are listed in its class's `DERIVED`, and left out wherever it is met.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message
from temporalio import workflow
from temporalio.worker import (
    HandleQueryInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)


class QueryChangedStateError(AssertionError):
    """A query handler changed the workflow's state."""


MAX_NODES = 200_000  # a state bigger than this is not checked: the walk would cost a query too much


class _TooBigError(Exception):
    pass


def fingerprint(value: Any, skip: frozenset[str] = frozenset()) -> Any:
    """A comparable picture of `value`: nested containers, dataclasses, objects' attributes, protobufs
    (None for a value of more than MAX_NODES parts). `skip`: attribute paths from `value` left out, wherever
    the walk meets the object that holds them (a part may reach the shared core before `core` does).

    An object (not a container or a dataclass) is pictured once, where the walk first meets it, and
    named by that order afterwards: a workflow's parts all hold one shared core, walked once."""
    seen: set[int] = set()
    pictured: dict[int, int] = {}
    count = [0]
    skipped: set[tuple[int, str]] = set()  # (the holding object's id, the attribute)
    for dotted in skip:
        *holder_path, attribute = dotted.split(".")
        holder = value
        for name in holder_path:
            holder = getattr(holder, name, None)
        if holder is not None:
            skipped.add((id(holder), attribute))

    def walk(v: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_NODES:
            raise _TooBigError
        if v is None or isinstance(v, str | int | float | bool | bytes):
            return v
        if depth > 40 or id(v) in seen:
            return ("<seen>", type(v).__name__)
        if isinstance(v, Message):
            return (type(v).__name__, v.SerializeToString(deterministic=True))
        if isinstance(v, Callable) and not hasattr(v, "__dict__"):  # type: ignore[arg-type]
            return ("<callable>", getattr(v, "__qualname__", type(v).__name__))
        seen.add(id(v))
        try:
            if isinstance(v, dict):
                return ("dict", tuple((walk(k, depth + 1), walk(x, depth + 1)) for k, x in v.items()))
            if isinstance(v, list | tuple | deque):
                return (type(v).__name__, tuple(walk(x, depth + 1) for x in v))
            if isinstance(v, set | frozenset):
                return ("set", tuple(sorted(repr(walk(x, depth + 1)) for x in v)))
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                return (type(v).__name__, tuple(walk(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)))
            attrs = getattr(v, "__dict__", None)
            slots = getattr(type(v), "__slots__", ())
            if attrs is None and not slots:
                return (type(v).__name__, repr(v))
            if id(v) in pictured:
                return ("<pictured>", pictured[id(v)])
            pictured[id(v)] = len(pictured)
            pairs = dict(attrs or {})
            for name in (slots if isinstance(slots, tuple | list) else (slots,)):
                if hasattr(v, name):
                    pairs[name] = getattr(v, name)
            for name in getattr(type(v), "DERIVED", ()):  # read once and kept: a function of the rest
                pairs.pop(name, None)
            return (
                type(v).__name__,
                tuple((k, walk(x, depth + 1)) for k, x in sorted(pairs.items()) if (id(v), k) not in skipped),
            )
        finally:
            seen.discard(id(v))

    try:
        return walk(value, 0)
    except _TooBigError:
        return None


class _Inbound(WorkflowInboundInterceptor):
    async def handle_query(self, input: HandleQueryInput) -> Any:
        instance = workflow.instance()
        skip = frozenset(getattr(type(instance), "QUERY_CACHES", ()))
        before = fingerprint(instance, skip)
        answer = await self.next.handle_query(input)
        if before is not None and fingerprint(instance, skip) != before:
            raise QueryChangedStateError(f"query {input.query!r} changed the state of {type(instance).__name__}")
        return answer


def query_guards() -> list[Interceptor]:
    """[QueryGuard()] when `IRIS_QUERY_GUARD=1` (the test suite's controllers), else none."""
    return [QueryGuard()] if os.environ.get("IRIS_QUERY_GUARD") == "1" else []


class QueryGuard(Interceptor):
    """Fails the query (the caller sees a query failure naming it) when a handler changed state."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound
