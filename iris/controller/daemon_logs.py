"""The daemons' own logs in the store, so an operator reads any host's log without a shell on it.

`iris controller serve` and `iris worker serve` call `ship_daemon_logs` right after setting up
logging: every structured event (one JSON line, as printed on stderr) and every warning of the
libraries underneath (the Temporal SDK, workflow loggers) also goes into a bounded in-memory
buffer, and a thread appends the buffer to the store once per FLUSH_SECONDS (sooner when half of
the buffer is full), one write per batch: a busy daemon costs about one store write a second, never
one per line, and a slow or unreachable store costs at most MAX_BUFFERED_LINES lines of memory
(older lines are dropped and the drop is logged).

Layout: the task log store's, under `<store>/daemon-logs/<kind>/`, with the daemon's id in the
place of a job id, and one segment (an "attempt") per process start, named by its start time in
milliseconds. A segment is closed at SEGMENT_BYTES and a new one begun; a daemon keeps its newest
KEEP_SEGMENTS, so its logs are bounded in the store too. Reading reuses the task logs' machinery
(`--since`, `--tail`, `--follow`): `iris logs controller|worker ID`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import unquote

import structlog

from worker_agent.object_store import Logs, ObjectLogStore, _filesystem, is_local, open_log_store
from worker_agent.storage import LogStore, LogWriter, StorageError, parse_store_url

KINDS: Final = ("controller", "worker")
FLUSH_SECONDS: Final = 1.0
MAX_BUFFERED_LINES: Final = 10_000
MAX_UNSENT_BYTES: Final = 4 << 20  # what a store that is away may leave waiting, beyond the buffer
SEGMENT_BYTES: Final = 8 << 20
KEEP_SEGMENTS: Final = 16
_TASK: Final = 0  # the log store's task index; a daemon has one stream


def daemon_log_url(store_url: str, kind: str) -> str:
    """Where the logs of every daemon of `kind` live."""
    if kind not in KINDS:
        raise ValueError(f"kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    return f"{store_url.rstrip('/')}/daemon-logs/{kind}"


def daemon_log_store(store_url: str, kind: str) -> Logs:
    return open_log_store(daemon_log_url(store_url, kind))


def daemon_ids(store_url: str, kind: str) -> list[str]:
    """The ids of the daemons of `kind` that have written logs, sorted."""
    url = daemon_log_url(store_url, kind)
    try:
        if is_local(url):
            names = [p.name for p in parse_store_url(url).iterdir() if p.is_dir()]
        else:
            fs, root = _filesystem(url)
            names = [str(e).rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(root, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(unquote(n) for n in names)


def last_written(logs: Logs, daemon_id: str) -> float | None:
    """When the daemon's newest segment last grew (unix time), if known."""
    segments = logs.attempts(daemon_id, _TASK)
    marks = logs.attempt_marks(daemon_id, _TASK, segments[-1]) if segments else []
    return marks[-1][1] if marks else None


def _drop_segment(logs: Logs, daemon_id: str, segment: int) -> None:
    if isinstance(logs, LogStore):
        path = logs.path_for(daemon_id, _TASK, segment)
        path.unlink(missing_ok=True)
        path.with_suffix(".times").unlink(missing_ok=True)
    elif isinstance(logs, ObjectLogStore):
        with contextlib.suppress(FileNotFoundError):
            logs.fs.rm(logs._attempt_prefix(daemon_id, _TASK, segment), recursive=True)


class DaemonLogShipper:
    """Buffers rendered log lines and appends them to the daemon's segment in the store, in batches."""

    def __init__(self, store_url: str, kind: str, daemon_id: str) -> None:
        if not daemon_id:
            raise ValueError("daemon_id: must not be empty")
        self.logs = daemon_log_store(store_url, kind)
        self.daemon_id = daemon_id
        self._lines: deque[str] = deque(maxlen=MAX_BUFFERED_LINES)
        self._dropped = 0
        self._lock = threading.Lock()
        self._writer: LogWriter | None = None
        self._segment_bytes = 0
        self._unsent = b""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"daemon-log-shipper {daemon_id}", daemon=True)
        self._thread.start()

    def add(self, line: str) -> None:
        """Queue one rendered line (no newline); never blocks on the store."""
        with self._lock:
            if len(self._lines) == self._lines.maxlen:
                self._dropped += 1
            self._lines.append(line)
            if len(self._lines) * 2 >= MAX_BUFFERED_LINES:
                self._wake.set()  # a burst: ship now rather than drop lines at the next flush

    def _take(self) -> bytes:
        with self._lock:
            lines, dropped = list(self._lines), self._dropped
            self._lines.clear()
            self._dropped = 0
        if dropped:
            dropped_line = _json_line("warning", __name__, "daemon_log_lines_dropped", count=dropped)
            lines.insert(0, dropped_line)
        return "".join(line + "\n" for line in lines).encode("utf-8", "replace")

    def _open_segment(self) -> LogWriter:
        segment = max(time.time_ns() // 1_000_000, 1 + max(self.logs.attempts(self.daemon_id, _TASK), default=0))
        old = self.logs.attempts(self.daemon_id, _TASK)
        for stale in old[: max(0, len(old) - KEEP_SEGMENTS + 1)]:
            _drop_segment(self.logs, self.daemon_id, stale)
        self._segment_bytes = 0
        return self.logs.open_writer(self.daemon_id, _TASK, segment)

    def flush(self) -> None:
        """Append what is buffered as one write (a new segment first when this one is full)."""
        with self._flush_lock:
            self._flush()

    def _flush(self) -> None:
        data = self._unsent + self._take()
        self._unsent = b""
        if not data:
            return
        try:
            if self._writer is not None and self._segment_bytes >= SEGMENT_BYTES:
                writer, self._writer = self._writer, None
                writer.close()
            if self._writer is None:
                self._writer = self._open_segment()
            self._writer.write(data)
        except BaseException:
            self._unsent = data[-MAX_UNSENT_BYTES:]  # retried next time, within bounds
            raise
        self._segment_bytes += len(data)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            with contextlib.suppress(OSError, StorageError, ValueError):  # the store is away: tried again
                self.flush()

    def close(self) -> None:
        """Ship what is left and close the segment (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        self._thread.join()
        with contextlib.suppress(OSError, StorageError, ValueError):
            self.flush()
            if self._writer is not None:
                self._writer.close()

    # -- the hooks ----------------------------------------------------------------------------

    def structlog_tee(self, _logger: Any, _method: str, rendered: Any) -> Any:
        """The last structlog processor: the line as rendered goes to the store as well as to stderr."""
        if isinstance(rendered, str):
            self.add(rendered)
        return rendered


def _json_line(level: str, logger: str, event: str, **fields: Any) -> str:
    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"event": event, "level": level, "logger": logger, **fields, "timestamp": stamp}, default=str)


class _StdlibHandler(logging.Handler):
    """Warnings of the libraries underneath (Temporal SDK, workflow loggers) as JSON lines."""

    def __init__(self, sink: DaemonLogShipper | None, stream: Any | None) -> None:
        super().__init__(logging.WARNING)
        self.sink, self.stream = sink, stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                message += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            line = _json_line(record.levelname.lower(), record.name, " ".join(message.split()))
            if self.sink is not None:
                self.sink.add(line)
            if self.stream is not None:
                self.stream.write(line + "\n")
                self.stream.flush()
        except Exception:  # a log line must never take the daemon down
            self.handleError(record)


def ship_daemon_logs(store_url: str, kind: str, daemon_id: str) -> DaemonLogShipper:
    """Tee this process's structured logs (and library warnings) into the store; flushed at exit."""
    import sys

    shipper = DaemonLogShipper(store_url, kind, daemon_id)
    config = structlog.get_config()
    structlog.configure(processors=[*config["processors"], shipper.structlog_tee])
    root = logging.getLogger()
    # Python prints unhandled warnings to stderr only while the root logger has no handler: keep that.
    root.addHandler(_StdlibHandler(shipper, None if root.handlers else sys.stderr))
    atexit.register(shipper.close)  # the CLI also closes it before its os._exit
    return shipper
