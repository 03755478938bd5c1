"""How Iris's processes log: one structlog event per line on stderr.

Its own module so that a daemon that is not the CLI (the local cluster's supervisor) configures logging the
same way without importing the CLI.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def configure_logging(json: bool = True) -> None:
    """Logs go to stderr, one event per line: JSON for the daemons (every event), readable for interactive
    commands, which print what they did themselves and log only warnings and errors (`iris job kill` of a tree
    printed an info event under its own answer)."""
    import structlog

    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if json else logging.WARNING),
    )


def configure_logging_on_import(json: bool = True) -> None:
    """`configure_logging(json)` as soon as something imports structlog (now, if something has).

    Importing structlog costs ~0.05 s of CPU (its console renderer loads rich's tracebacks and pygments), and
    most commands that end early (`--help`, a refused option, no cluster) never log: they do not pay it.
    An event logged before the configuration would print to stdout in structlog's defaults; none can be.
    """
    if "structlog" in sys.modules:
        configure_logging(json)
    else:
        sys.meta_path.insert(0, _ConfigureOnImport(json))


class _ConfigureOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds structlog as the import system would, and configures it once its module has run."""

    def __init__(self, json: bool) -> None:
        self.json = json
        self.loader: importlib.abc.Loader | None = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "structlog":
            return None
        sys.meta_path.remove(self)  # once; and the search below finds the real module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            self.loader, spec.loader = spec.loader, self  # structlog's submodules load as before
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        assert self.loader is not None
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert self.loader is not None
        self.loader.exec_module(module)
        configure_logging(self.json)
