"""Every field of every message survives the wire, and is written as the SDK writes it
(activities.contracts.dataclass_json).

The messages are the dataclasses of activities/contracts/ (every module of it, found, not listed) and
workflows/messages.py: signals, workflow and activity inputs and results; and the scheduler's continue-as-new
carry (workflows/scheduler/scheduler_carry_schema.py).
Each is built here with every field set to a value that is not its default, generated from its type hints
(not listed by hand), sent through the SDK's converter and read back through Iris's: a field a decoder
dropped, or read as another type, fails by message and field.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import pkgutil
import types
import typing
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, value_to_type

import activities.contracts
import workflows.messages
import workflows.scheduler.scheduler_carry_schema
from activities.contracts.dataclass_json import plan_for
from iris.security.codec import data_converter

MESSAGES = sorted(
    {
        cls
        for module in (
            activities.contracts,
            *(importlib.import_module(f"activities.contracts.{m.name}")  # every module of the contract, found
              for m in pkgutil.iter_modules(activities.contracts.__path__)),
            workflows.messages,
            workflows.scheduler.scheduler_carry_schema,
        )
        for cls in vars(module).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
    },
    key=lambda cls: cls.__name__,
)


def _value(hint: Any, default: Any, salt: str) -> Any:
    """A value of type `hint` that is not `default`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return not default if isinstance(default, bool) else True
    if hint is int:
        return 7 if default != 7 else 8
    if hint is float:
        return 2.5 if default != 2.5 else 3.5
    if hint is str:
        return f"{salt}-✓"
    if hint is Any or hint is object:
        return {"k": [1, "x", True, 2.5]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(m for m in reversed(list(hint)) if m != default)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _message(hint)
    if origin is list:
        return [_value(args[0], None, salt), _value(args[0], None, salt + "2")]
    if origin is tuple:
        return tuple(_value(a, None, f"{salt}{i}") for i, a in enumerate(args))
    if origin is dict:
        key = 3 if args[0] is int else f"{salt}-key"
        return {key: _value(args[1], None, salt)}
    if origin in (typing.Union, types.UnionType):
        return _value(next(a for a in args if a is not type(None)), default, salt)
    raise AssertionError(f"no generator for {hint!r}: teach _value the new type")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _message(cls: type) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _value(hints[f.name], _default(f), f.name) for f in dataclasses.fields(cls) if f.init})


def _sent(value: Any) -> Payload:
    """What a sender (any process, the SDK's own converter) puts on the wire."""
    return DataConverter.default.payload_converter.to_payloads([value])[0]


def _read(payload: Payload, hint: Any) -> Any:
    """What an Iris worker or client reads from it."""
    return data_converter(None).payload_converter.from_payloads([payload], [hint])[0]


def test_there_are_messages() -> None:
    assert len(MESSAGES) >= 20, [cls.__name__ for cls in MESSAGES]


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
def test_every_field_round_trips(cls: type) -> None:
    """Every field not at its default goes out and comes back equal, as the SDK's own decoder reads it."""
    message = _message(cls)
    for f in dataclasses.fields(cls):
        if f.init:
            assert getattr(message, f.name) != _default(f), f"{cls.__name__}.{f.name}: the generator kept the default"
    payload = _sent(message)
    assert message == _read(payload, cls)
    assert message == value_to_type(cls, json.loads(payload.data), [])
    assert [message, message] == _read(_sent([message, message]), list[cls])  # type: ignore[valid-type]


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
def test_iris_writes_the_bytes_the_sdk_writes(cls: type) -> None:
    """Whichever process encodes a message (an Iris worker, a client on the SDK's converter), the payload
    in the history is the same: nothing replays differently for who wrote it."""
    message = _message(cls)
    iris = data_converter(None).payload_converter
    assert _sent(message).data == iris.to_payloads([message])[0].data
    assert _sent([message, None]).data == iris.to_payloads([[message, None]])[0].data


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
def test_every_message_is_decoded_by_plan(cls: type) -> None:
    """No message falls back to the SDK's per-value type hints (the cost that once wedged workflow tasks)."""
    assert plan_for(cls) is not None


def test_missing_fields_default_and_unknown_ones_are_ignored() -> None:
    """A message from an older or newer sender still reads, as the SDK's converter reads it."""
    from workflows.messages import Enqueue, SchedulingSpec, TaskResult

    old = {"job_id": "j", "spec": {"cpu_millis": 5, "memory_bytes": 6, "future": 1}, "attempts": {"3": 0}}
    assert Enqueue("j", SchedulingSpec(5, 6), {3: 0}, 0.0) == _read(_sent(old), Enqueue)
    assert TaskResult(2, "SUCCEEDED") == _read(_sent({"task_index": 2, "state": "SUCCEEDED", "new": [1]}), TaskResult)


@pytest.mark.parametrize(
    "raw",
    [{"task_index": "2", "state": "SUCCEEDED"}, {"state": "SUCCEEDED"}, {"task_index": 2, "state": None}, [1]],
)
def test_a_value_of_the_wrong_type_is_an_error(raw: object) -> None:
    """A malformed message raises (its signal is dropped by the workflow), never becomes a half-built value."""
    from workflows.messages import TaskResult

    with pytest.raises((TypeError, ValueError)):
        _read(_sent(raw), TaskResult)


def test_scalar_fields_read_at_once_or_one_by_one_give_the_same_message() -> None:
    """Scalars of their field's exact type are read at once; an int where a float is declared (a JSON `7`),
    or a bool where an int is, is converted field by field: the same message either way."""
    from workflows.messages import Enqueue, SchedulingSpec

    exact = {"job_id": "j", "spec": {"cpu_millis": 5, "memory_bytes": 6, "coordinator": True}, "attempts": {"3": 0},
             "submitted_at": 7.0}  # fmt: skip
    loose = {**exact, "submitted_at": 7, "spec": {**exact["spec"], "cpu_millis": True}}  # type: ignore[dict-item]
    assert Enqueue("j", SchedulingSpec(5, 6, coordinator=True), {3: 0}, 7.0) == _read(_sent(exact), Enqueue)
    read = _read(_sent(loose), Enqueue)
    assert Enqueue("j", SchedulingSpec(1, 6, coordinator=True), {3: 0}, 7.0) == read
    assert float is type(read.submitted_at) and int is type(read.spec.cpu_millis)
