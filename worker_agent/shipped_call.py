"""Unpickle a shipped call, and pickle a plain result, without importing cloudpickle when it is not needed.

Why: importing cloudpickle pulls in typing, dataclasses, logging, platform, uuid and more, ~25 ms
of CPU in a fresh interpreter, and a container's task runner is a fresh interpreter on every
attempt, often under a fraction of a core. Yet loading needs little of it: ``cloudpickle.loads``
is ``pickle.loads``, and a by-value function's pickle names only six small helpers of
``cloudpickle.cloudpickle`` that rebuild functions, their code and their cells. This module holds
copies of those six (cloudpickle 3.1's, unchanged) and an unpickler that finds them here; every
other name of cloudpickle's (dynamic classes, enums, type variables, ...) imports cloudpickle
itself, as plain unpickling would. Tests check the copies rebuild what cloudpickle's own do.

Pickling a result is the same in reverse: a value made only of None, booleans, numbers, strings,
bytes and the builtin containers is written by the pickle module's own code even inside
cloudpickle (its hook is not consulted for those types), so it is pickled here to the same bytes;
anything else goes through ``cloudpickle.dumps``.
"""

from __future__ import annotations

import sys
import types

try:  # the C unpickler itself: the pickle module on top of it imports ``re`` (~5 ms) for nothing here
    from _pickle import Unpickler, dumps
except ImportError:  # an interpreter without the accelerator
    from pickle import Unpickler, dumps  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["dump_result", "load_call"]

_CLOUDPICKLE_MODULES = frozenset({"cloudpickle.cloudpickle", "cloudpickle.cloudpickle_fast"})
RESULT_PROTOCOL = 5
"""cloudpickle's DEFAULT_PROTOCOL (pickle.HIGHEST_PROTOCOL since Python 3.8)."""
_PLAIN_ATOMS = frozenset({type(None), bool, int, float, str, bytes, bytearray})
_PLAIN_CONTAINERS = frozenset({tuple, list, set, frozenset})
_PLAIN_WALK_LIMIT = 10_000
"""Containers looked into before a result is handed to cloudpickle anyway (big or cyclic values)."""


# -- cloudpickle 3.1's helpers for rebuilding functions (cloudpickle/cloudpickle.py) ---------------


class _EmptyCellValue:
    """Sentinel for empty cells."""


def _builtin_type(name: str) -> Any:
    if name == "ClassType":  # cloudpickle < 1.3 pickles
        return type
    return getattr(types, name)


def subimport(name: str) -> types.ModuleType:
    __import__(name)  # __import__("a.b") returns a, not a.b
    return sys.modules[name]


def _make_function(code: types.CodeType, globals: dict[str, Any], name: str, argdefs: Any, closure: Any) -> Any:
    globals["__builtins__"] = __builtins__
    return types.FunctionType(code, globals, name, argdefs, closure)


def _make_empty_cell() -> Any:
    if False:
        # trick the compiler into creating an empty cell in our lambda
        cell = None
        raise AssertionError("this route should not be executed")

    return (lambda: cell).__closure__[0]  # type: ignore[has-type,index]


def _make_cell(value: Any = _EmptyCellValue) -> Any:
    cell = _make_empty_cell()
    if value is not _EmptyCellValue:
        cell.cell_contents = value
    return cell


def _function_setstate(obj: Any, state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Update the state of a dynamic function (``__globals__`` and ``__closure__`` in place: they are read-only)."""
    state, slotstate = state  # type: ignore[assignment]
    obj.__dict__.update(state)
    obj_globals = slotstate.pop("__globals__")
    obj_closure = slotstate.pop("__closure__")
    slotstate.pop("_cloudpickle_submodules")  # they are imported by now: the state only held them
    obj.__globals__.update(obj_globals)
    obj.__globals__["__builtins__"] = __builtins__
    if obj_closure is not None:
        for i, cell in enumerate(obj_closure):
            try:
                value = cell.cell_contents
            except ValueError:  # cell is empty
                continue
            obj.__closure__[i].cell_contents = value
    for k, v in slotstate.items():
        setattr(obj, k, v)


_LIGHT_HELPERS = {
    helper.__name__: helper
    for helper in (_builtin_type, subimport, _make_function, _make_empty_cell, _make_cell, _function_setstate)
}


class _CallUnpickler(Unpickler):
    """Finds the function-rebuilding helpers of cloudpickle here; anything else where pickle would."""

    def find_class(self, module: str, name: str) -> Any:
        if module in _CLOUDPICKLE_MODULES and name in _LIGHT_HELPERS:
            return _LIGHT_HELPERS[name]
        return super().find_class(module, name)


def load_call(payload: bytes) -> Any:
    """What ``cloudpickle.loads(payload)`` returns, importing cloudpickle only if the payload needs more of it."""
    import io  # loaded by the interpreter's start-up already

    return _CallUnpickler(io.BytesIO(payload)).load()


def is_plain(value: object) -> bool:
    """Whether ``value`` holds only None, bools, numbers, str, bytes and tuples, lists, sets, dicts of them."""
    pending, looked = [value], 0
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _PLAIN_ATOMS:
            continue
        looked += 1
        if looked > _PLAIN_WALK_LIMIT:
            return False
        if kind is dict:
            pending.extend(item.keys())  # type: ignore[attr-defined]
            pending.extend(item.values())  # type: ignore[attr-defined]
        elif kind in _PLAIN_CONTAINERS:
            pending.extend(item)  # type: ignore[arg-type]
        else:
            return False
    return True


def dump_result(value: object) -> bytes:
    """The bytes ``cloudpickle.dumps(value)`` writes; cloudpickle is imported only for values that are not plain."""
    if is_plain(value):
        return dumps(value, RESULT_PROTOCOL)
    import cloudpickle

    return cloudpickle.dumps(value)  # type: ignore[no-any-return]
