"""Run code the moment a module is first imported, not before: configuring structlog imports it (~90 ms of CPU,
its console renderer loads rich's tracebacks and pygments), which a process that never logs need not pay.

Both `import iris` (Iris's log lines go to stderr) and the `iris` command (its own renderer and level) configure
structlog this way; a module of its own so that `import iris` stays light.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """`then(module)` as soon as the top-level module `name` has been imported: now, if it has been already."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `name` as the import system would, and calls `then` once its module has run. Removes itself once used;
    the module's submodules load as before."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self._name = name
        self._then = then
        self._loader: importlib.abc.Loader | None = None

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != self._name:
            return None
        sys.meta_path.remove(self)  # once; and the search below finds the real module
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self._loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        assert self._loader is not None
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert self._loader is not None
        self._loader.exec_module(module)
        self._then(module)
