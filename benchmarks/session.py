"""What every bench command does around its run: quiet logs, SIGTERM as Ctrl-C, and a cluster always stopped."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import structlog

from iris.local.cluster import LocalCluster

__all__ = ["quiet_logging", "sigterm_as_interrupt", "stop_cluster"]


def quiet_logging() -> None:
    """Only warnings from the local cluster's structlog output, on stderr, so the report stays readable."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def stop_cluster(cluster: LocalCluster, home: Path, created: bool) -> None:
    """Stop the bench's cluster and remove a home it created; a second Ctrl-C must not skip this."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cluster.down()
        if created:
            shutil.rmtree(home, ignore_errors=True)
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while the bench runs, so the cluster is stopped either way."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
