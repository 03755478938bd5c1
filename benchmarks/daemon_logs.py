"""What shipping a daemon's own log to the store costs: `python -m benchmarks.daemon_logs`.

Prints the time of one structlog event rendered as JSON to a sink, without and with the tee into
the store's buffer, and how many store writes a burst of events costs (one per flush, not one
per line).
"""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import structlog

from iris.controller import daemon_logs

EVENTS = 20_000


def _configure(tee: daemon_logs.DaemonLogShipper | None) -> structlog.typing.FilteringBoundLogger:
    processors: list = [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                        structlog.processors.JSONRenderer()]  # fmt: skip
    if tee is not None:
        processors.append(tee.structlog_tee)
    structlog.configure(processors=processors, logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger("bench").bind(worker_id="w-1")
    return logger


def _per_event(logger: structlog.typing.FilteringBoundLogger) -> float:
    start = time.perf_counter()
    for n in range(EVENTS):
        logger.info("task_started", job_id="job-1", task_index=n, attempt=0)
    return (time.perf_counter() - start) / EVENTS * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        plain = _per_event(_configure(None))
        shipper = daemon_logs.DaemonLogShipper(Path(root).as_uri(), "worker", "w-1")
        writes = [0]
        original = shipper.flush

        def counted() -> None:
            writes[0] += 1
            original()

        shipper.flush = counted  # type: ignore[method-assign]
        start = time.perf_counter()
        teed = _per_event(_configure(shipper))
        shipper.close()
        elapsed = time.perf_counter() - start
        stored = len(daemon_logs.daemon_log_store(Path(root).as_uri(), "worker").read_lines("w-1", 0))
    print(f"structlog event to a sink:            {plain:6.1f} us")
    print(f"the same, teed into the store buffer: {teed:6.1f} us (+{teed - plain:.1f} us)")
    print(f"{EVENTS} events in {elapsed:.2f} s: {writes[0]} store writes, {stored} lines stored")


if __name__ == "__main__":
    main()
