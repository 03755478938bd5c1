"""How Iris's processes log: one structlog event per line on stderr.

Its own module so that a daemon that is not the CLI (the local cluster's supervisor) configures logging the
same way without importing the CLI.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from iris.import_hooks import after_import


def configure_logging(json: bool = True) -> None:
    """Logs go to stderr, one event per line: JSON for the daemons (every event), readable for interactive
    commands, which print what they did themselves and log only warnings and errors (`iris job kill` of a tree
    printed an info event under its own answer)."""
    import structlog  # here, not at the top: see configure_logging_on_import

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

    Most commands that end early (`--help`, a refused option, no cluster) never log: they do not pay for
    importing structlog (iris.import_hooks). No event can be logged before the configuration.
    """
    after_import("structlog", lambda _: configure_logging(json))
