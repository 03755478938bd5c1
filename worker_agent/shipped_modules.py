"""The user's modules a shipped function imports by name, made importable on the worker before it runs.

cloudpickle carries a function's globals, so a sibling module the script imported at its top travels with
the function (by value: iris/client/code_shipping.py registers it). An `import sib` inside the function
is not a global: it looks `sib` up in `sys.modules` when it runs, and the worker has no sib.py. The client
wraps such a function in `call_with_modules`, which brings the modules along and names them there first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["call_with_modules"]


def call_with_modules(modules: tuple[ModuleType, ...], fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Make each module importable by its name unless this host has one of that name, then call `fn`."""
    for module in modules:
        if module.__name__ not in sys.modules and not _importable(module.__name__):
            sys.modules[module.__name__] = module
    return fn(*args, **kwargs)


def _importable(name: str) -> bool:
    import importlib.util  # only a call that brought modules pays for it

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a submodule of a package this host does not have
        return False
