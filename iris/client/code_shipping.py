"""Client side of shipping a callable to the workers: pickle it, and unpickle what comes back.

Policy: **by-value pickling of the user's modules; installed packages must be on the worker.**

cloudpickle normally pickles a function defined in an importable module *by reference* (module
name + qualified name), which fails on a worker that does not have that module, typically the
user's own project sitting next to the script that submits the job. So, for the duration of one
dump, the top-level package of every "user module" involved is registered with
``cloudpickle.register_pickle_by_value``: its functions and classes travel as code.

A module is a user module unless it is

- ``__main__`` (cloudpickle already ships it by value),
- in the standard library, or a built-in/frozen module,
- installed: its file lives under a ``site-packages`` or ``dist-packages`` directory (or the
  interpreter's own library directories), or
- one of Iris's own packages (``scheduler``, ``workflows``, ``activities``, ``worker_agent``,
  ``iris``), which the worker runs anyway.

An editable install of the user's own project lives in their source tree, so it counts as user
code and its current local source is shipped. Modules are found from the callable, from the module
globals its code names (a sibling module the script imports, or what it took from one), and, one
container level deep, from its arguments (their classes, or themselves if functions or classes).
Modules referenced only indirectly (e.g. a global inside a by-reference function) are not found.
"""

from __future__ import annotations

import functools
import io
import pickle
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import cloudpickle

from worker_agent.shipped_modules import call_with_modules

__all__ = [
    "IRIS_PACKAGES",
    "NotPlainDataError",
    "pickle_callable",
    "unpickle_plain",
    "unpickle_result",
    "user_modules",
]

IRIS_PACKAGES: Final = frozenset({"scheduler", "workflows", "activities", "worker_agent", "iris"})
_INSTALL_DIR_NAMES: Final = frozenset({"site-packages", "dist-packages"})
_MAX_SCANNED_ARGUMENTS: Final = 1000
_DEFINED_IN_A_MODULE: Final = (type, types.FunctionType, types.MethodType, types.BuiltinFunctionType)

# The by-value registry is process-global; this lock keeps one dump's registrations from being
# undone under another thread's dump.
_registry_lock = threading.Lock()


def pickle_callable(
    fn: Callable[..., Any], args: Iterable[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> bytes:
    """Pickle ``(fn, args, kwargs)`` for ``worker_agent.task_runner``, user modules by value."""
    if not callable(fn):
        raise TypeError(f"the task must be callable, got {type(fn).__name__}")
    call = (fn, tuple(args), dict(kwargs or {}))
    with _registry_lock:
        already = set(cloudpickle.list_registry_pickle_by_value())
        registered = [module for module in user_modules(call) if module.__name__ not in already]
        imported = tuple(m for m in _globals_used(fn) if isinstance(m, ModuleType) and _shippable_root(m.__name__))
        if imported:  # `import sib` inside it looks sib up by name there: it comes along, named (shipped_modules)
            call = (functools.partial(call_with_modules, imported, fn), call[1], call[2])
        for module in registered:
            cloudpickle.register_pickle_by_value(module)
        try:
            return cloudpickle.dumps(call)
        finally:
            for module in registered:
                cloudpickle.unregister_pickle_by_value(module)


def unpickle_result(data: bytes) -> Any:
    """The value a task returned, from the bytes the task runner stored."""
    return cloudpickle.loads(data)


# What a plain value's pickle may name: data types that run no code of the pickle's choosing when built.
_PLAIN_CLASSES: Final = frozenset({
    *(("builtins", name) for name in ("set", "frozenset", "bytearray", "complex", "range", "slice")),
    ("collections", "OrderedDict"), ("collections", "deque"), ("decimal", "Decimal"), ("fractions", "Fraction"),
    *(("datetime", name) for name in ("date", "time", "datetime", "timedelta", "timezone")),
    ("uuid", "UUID"), ("pathlib", "PurePosixPath"), ("pathlib", "PosixPath"),
})  # fmt: skip


class NotPlainDataError(ValueError):
    """A pickle names something beyond plain data (`_PLAIN_CLASSES`): `what` (module.name)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN_CLASSES:
            return super().find_class(module, name)
        raise NotPlainDataError(f"{module}.{name}")


def unpickle_plain(data: bytes) -> Any:
    """A value another user's task returned, if it is plain data (numbers, strings, bytes, containers of
    them, dates, decimals, ...); NotPlainDataError naming what else it names.

    Unpickling runs whatever the pickle names (a `__reduce__` can name `os.system`): a value from another
    user's code is that user's code running in the reader's process, with the reader's credentials.
    """
    return _PlainUnpickler(io.BytesIO(data)).load()


def user_modules(call: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> list[ModuleType]:
    """The modules to register by value for ``(fn, args, kwargs)``, one per user package."""
    fn, args, kwargs = call
    found: dict[str, ModuleType] = {}
    for obj in [fn, *_globals_used(fn), *_arguments(args, kwargs)]:
        module_name = _module_name_of(obj)
        if module_name is None:
            continue
        module = _shippable_root(module_name)
        if module is not None:
            found.setdefault(module.__name__, module)
    return list(found.values())


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Any]:
    """Arguments and the items of argument containers, one level deep, bounded in number."""
    top_level = [*args, *kwargs.values()]
    count = 0
    for value in top_level:
        items: Iterable[Any] = ()
        if isinstance(value, list | tuple | set | frozenset):
            items = value
        elif isinstance(value, dict):
            items = [*value.keys(), *value.values()]
        for item in [value, *items]:
            count += 1
            if count > _MAX_SCANNED_ARGUMENTS:
                return
            yield item


def _globals_used(fn: Any) -> Iterator[Any]:
    """The module globals a function's code names (its nested functions' too): a sibling module of the script
    (`import sib` at its top, or inside the function), or what was taken from one (`from sib import add`).

    cloudpickle carries them with the function, by reference unless their module ships by value: a module
    next to the script, which workers do not have, must (the task runner makes it importable there).
    """
    if isinstance(fn, functools.partial):
        fn = fn.func
    code, namespace = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if not isinstance(code, types.CodeType) or not isinstance(namespace, dict):
        return
    names: set[str] = set()
    codes = [code]
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    for name in sorted(names):
        if name in namespace:
            yield namespace[name]
        elif isinstance(sys.modules.get(name), ModuleType):  # imported only inside the function
            yield sys.modules[name]


def _module_name_of(obj: Any) -> str | None:
    """The module defining ``obj`` if it is a function or class, the module itself, else the module of its class."""
    if isinstance(obj, functools.partial):
        obj = obj.func
    if isinstance(obj, ModuleType):
        return obj.__name__
    owner = obj if isinstance(obj, _DEFINED_IN_A_MODULE) else type(obj)
    name = getattr(owner, "__module__", None)
    return name if isinstance(name, str) else None


def _shippable_root(module_name: str) -> ModuleType | None:
    """The module to register for ``module_name``'s package, or None if it must not ship.

    Normally the top-level package; for a namespace package (no file of its own) the first
    regular package under it, so a user's ``company.project`` is not confused with an installed
    ``company.other`` sharing the namespace.
    """
    parts = module_name.split(".")
    top = parts[0]
    if top == "__main__" or top in IRIS_PACKAGES or top in sys.stdlib_module_names:
        return None
    for depth in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:depth]))
        if module is None:
            return None
        file = getattr(module, "__file__", None)
        if file:
            return None if _is_installed(Path(file)) else module
        if getattr(module, "__path__", None) is None:
            return None  # built-in or frozen module
    return None


def _is_installed(file: Path) -> bool:
    """Whether a module file belongs to the interpreter or an installed distribution."""
    if _INSTALL_DIR_NAMES.intersection(file.parts):
        return True
    resolved = file.resolve()
    return any(resolved.is_relative_to(directory) for directory in _interpreter_dirs())


@functools.cache
def _interpreter_dirs() -> tuple[Path, ...]:
    """Library directories of this interpreter (stdlib and install targets), resolved."""
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(Path(paths[name]).resolve() for name in names if name in paths)
