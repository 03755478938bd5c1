"""Unpickle a shipped call, and pickle a plain result, without importing cloudpickle when it is not needed.

Why: importing cloudpickle pulls in typing, dataclasses, logging, platform, uuid and more, ~25 ms
of CPU in a fresh interpreter, and a container's task runner is a fresh interpreter on every
attempt, often under a fraction of a core. Yet loading needs little of it: ``cloudpickle.loads``
is ``pickle.loads``, and a by-value function's pickle names only six small helpers of
``cloudpickle.cloudpickle`` that rebuild functions, their code and their cells. This module
implements those six against what the pickle passes them, and an unpickler that finds them here;
every other name of cloudpickle's (dynamic classes, enums, type variables, ...) imports cloudpickle
itself, as plain unpickling would. Tests check they rebuild what cloudpickle's own do.

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
CHECKED_CLOUDPICKLE = ("3.0", "3.1")
"""The cloudpickle releases (major.minor) whose pickles these helpers were checked against; pyproject.toml
pins cloudpickle to them, and tests/worker_agent/test_shipped_call.py fails on any other: a new release
is taken only once the helpers are checked against it (its reducer may pass them other arguments)."""
RESULT_PROTOCOL = 5
"""cloudpickle's DEFAULT_PROTOCOL (pickle.HIGHEST_PROTOCOL since Python 3.8)."""
_PLAIN_ATOMS = frozenset({type(None), bool, int, float, str, bytes, bytearray})
_PLAIN_CONTAINERS = frozenset({tuple, list, set, frozenset})
_PLAIN_WALK_LIMIT = 10_000
"""Containers looked into before a result is handed to cloudpickle anyway (big or cyclic values)."""


# -- the names a by-value function's pickle refers to, implemented here --------------------------
# A pickle made by cloudpickle rebuilds a function by calling these names of cloudpickle's module;
# what each must do is fixed by the arguments cloudpickle's reducer writes. They are written here
# against that contract (not taken from cloudpickle), and the tests compare the functions they
# rebuild with cloudpickle's own.

_NO_VALUE = object()


def _builtin_type(name: str) -> Any:
    """A type of the `types` module, by name ("ClassType" is what pickles of old cloudpickles say for `type`)."""
    return type if name == "ClassType" else getattr(types, name)


def subimport(name: str) -> types.ModuleType:
    """The module `name` itself, dotted names included."""
    __import__(name)
    return sys.modules[name]


def _make_function(code: types.CodeType, globals: dict[str, Any], name: str, argdefs: Any, closure: Any) -> Any:
    """A function of `code` over `globals`; its globals see the builtins like any module's."""
    globals["__builtins__"] = __builtins__
    return types.FunctionType(code, globals, name, argdefs, closure)


def _make_empty_cell() -> Any:
    """A closure cell with nothing in it yet; its value may be set later by the function's state."""
    return types.CellType()


def _make_cell(value: Any = _NO_VALUE) -> Any:
    """A closure cell holding `value` (empty when no value is given)."""
    return types.CellType() if value is _NO_VALUE else types.CellType(value)


def _function_setstate(func: Any, state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Give a rebuilt function its attributes, globals and cell contents.

    The pickle sends `(dict, slots)`: `dict` is the function's `__dict__`; `slots` has its
    `__globals__` and `__closure__` (both read-only on a function, so filled in place), the
    submodules it needed imported (done by unpickling them) and attributes such as `__name__`,
    `__qualname__`, `__defaults__`, `__kwdefaults__`, `__module__`, `__doc__`, `__annotations__`.
    """
    attributes, slots = state
    func.__dict__.update(attributes)
    slots = dict(slots)
    func.__globals__.update(slots.pop("__globals__"))
    func.__globals__["__builtins__"] = __builtins__
    closure = slots.pop("__closure__")
    slots.pop("_cloudpickle_submodules", None)
    for target, source in zip(func.__closure__ or (), closure or (), strict=False):
        try:  # noqa: SIM105 (contextlib is one more import before the function)
            target.cell_contents = source.cell_contents
        except ValueError:  # an empty cell stays empty
            pass
    for name, value in slots.items():
        setattr(func, name, value)


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
