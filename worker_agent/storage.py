"""URL-addressed blob and log stores shared by the client, the worker agent and the task runner.

Why this module exists: a task's pickled function, its result and its logs must be reachable by
several processes (client, agent, task runner, CLI) through one string they can pass around, a
store URL. Today the only backend is a directory (local, or a shared mount); the URL scheme leaves
room for ``gs://`` and ``s3://`` later without changing callers.

Keys come partly from users, so every key component is encoded before it touches the
filesystem, and the resolved path must lie under the store root: ``blob_files`` holds that layout
and the blob file operations, with nothing but ``os``, for the task runner's fresh interpreter.

This module uses only the standard library.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final

from worker_agent.blob_files import (
    BlobNotFoundError,
    StorageError,
    contained_path,
    delete_blob,
    encode_component,
    read_blob,
    split_key,
    store_root,
    write_blob,
)

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = [
    "BlobNotFoundError",
    "BlobStore",
    "LogCursor",
    "LogReading",
    "LogStore",
    "LogStoreError",
    "LogWriter",
    "StorageError",
    "encode_component",
    "join_key",
    "last_lines",
    "parse_store_url",
]

_LINE_WINDOW: Final = 1 << 16  # how far back `since` looks for the start of a line
MARK_SECONDS: Final = 1.0
"""How often a log writer notes how far its log had grown (the time resolution of `logs --since`)."""


def parse_store_url(url: str) -> Path:
    """Turn a store URL (``file:///abs/path`` or a plain absolute path) into the root directory.

    Any other scheme is rejected by name, so a typo such as ``gcs://`` fails at construction
    rather than as a confusing file-not-found later.
    """
    return Path(store_root(url))


class LogStoreError(StorageError):
    """A log could not be opened, written or read (disk full, unwritable directory, ...)."""


def join_key(*parts: str) -> str:
    """Build a key in which each part is exactly one component, even if it contains ``/``.

    Use it for untrusted names: ``join_key("jobs", job_id, "fn")`` keeps a job id such as
    ``a/../b`` inside a single, harmless component.
    """
    if not parts:
        raise ValueError("join_key needs at least one part")
    return "/".join(_escape_part(part) for part in parts)


def _escape_part(part: str) -> str:
    if not part:
        raise ValueError("key parts must be non-empty")
    return part.replace("%", "%25").replace("/", "%2F")


_split_key = split_key  # the name other modules of this package import


def _contained_path(root: Path, components: list[str], what: str) -> Path:
    """Join encoded components under root and check the resolved result stays under root."""
    return Path(contained_path(str(root), components, what))


def _require_absolute(root: Path) -> None:
    if not root.is_absolute():
        raise ValueError(f"store root must be an absolute path, got {str(root)!r}")


@dataclass(frozen=True)
class BlobStore:
    """Immutable byte blobs under ``/``-separated keys, in one directory.

    Writes are atomic (temporary file, fsync, rename), so a reader sees either no blob or the
    whole blob, never a torn one, even if the writer dies mid-write. ``durable=False`` skips the
    fsync (still atomic for readers, not across a power loss): for a task attempt's own scratch
    store, whose outputs the agent copies to the shared store durably.
    """

    root: Path
    durable: bool = True

    def __post_init__(self) -> None:
        _require_absolute(self.root)

    @classmethod
    def from_url(cls, url: str, *, durable: bool = True) -> BlobStore:
        """Open the store named by ``url`` (``file:///abs/path`` or an absolute path)."""
        return cls(root=parse_store_url(url), durable=durable)

    @property
    def url(self) -> str:
        """The URL that reopens this store in another process (e.g. the task runner)."""
        return self.root.as_uri()

    def path_for(self, key: str) -> Path:
        """The file that holds ``key`` (for messages and debugging; it may not exist)."""
        return _contained_path(self.root, _split_key(key), f"blob key {key!r}")

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing any previous blob atomically."""
        write_blob(str(self.path_for(key)), key, data, durable=self.durable)

    def get(self, key: str) -> bytes:
        """Return the blob under ``key``; raise BlobNotFoundError if there is none."""
        return read_blob(str(self.path_for(key)), key)

    def exists(self, key: str) -> bool:
        """Whether a blob is stored under ``key``."""
        return self.path_for(key).is_file()

    def delete(self, key: str) -> None:
        """Remove the blob under ``key``; a missing blob is not an error (idempotent)."""
        delete_blob(str(self.path_for(key)), key)

    def delete_prefix(self, prefix: str) -> None:
        """Remove the blob ``prefix`` and every blob whose key starts with ``prefix + '/'``.

        Prefixes match whole components (``jobs/a`` does not remove ``jobs/ab``); idempotent.
        """
        path = self.path_for(prefix)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {prefix!r} at {path}: {exc.strerror or exc}") from exc


class LogWriter(io.FileIO):
    """An unbuffered, append-mode log file whose I/O errors surface as LogStoreError.

    It is a real file with a descriptor, so a runtime can hand it to a subprocess as stdout and
    stderr; the agent can also write its own marker lines through it. Writes through this object
    are complete (short writes are retried); writes by a child process go to the descriptor
    directly and are the child's to handle.
    """

    def __init__(self, path: Path) -> None:
        try:
            super().__init__(path, "ab")
        except OSError as exc:
            raise LogStoreError(f"cannot open log file {path}: {exc.strerror or exc}") from exc

    def write(self, data: ReadableBuffer, /) -> int:
        """Append all of ``data``; raise LogStoreError (e.g. disk full) instead of OSError."""
        view = memoryview(data).cast("B")
        written = 0
        try:
            while written < len(view):
                count = super().write(view[written:])
                if not count:
                    raise LogStoreError(f"cannot write log file {self.name!s}: no progress")
                written += count
        except OSError as exc:
            raise LogStoreError(f"cannot write log file {self.name!s}: {exc.strerror or exc}") from exc
        return written


@dataclass(frozen=True)
class LogCursor:
    """Where a follower stopped reading: one byte offset per attempt, in attempt order.

    Offsets only ever point just past a newline (or at the end of a finished attempt), so a
    cursor never splits a line. It is a plain value, so a CLI can keep it between polls.
    """

    offsets: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        attempts = [attempt for attempt, _ in self.offsets]
        if attempts != sorted(set(attempts)):
            raise ValueError(f"cursor attempts must be unique and increasing, got {attempts}")
        if any(attempt < 0 or offset < 0 for attempt, offset in self.offsets):
            raise ValueError(f"cursor attempts and offsets must be non-negative, got {self.offsets}")

    def offset(self, attempt: int) -> int:
        """Bytes of ``attempt``'s log already returned (0 for an attempt never seen)."""
        return dict(self.offsets).get(attempt, 0)


def _split_lines(data: bytes) -> list[str]:
    """Split log bytes into text lines without their newline (``\\r\\n`` tolerated)."""
    if not data:
        return []
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [part.removesuffix(b"\r").decode("utf-8", "replace") for part in parts]


_ATTEMPT_PREFIX: Final = "attempt-"
_ATTEMPT_SUFFIX: Final = ".log"
_MARKS_SUFFIX: Final = ".times"


class _MarkedLogWriter(LogWriter):
    """A LogWriter that notes `<size> <unix time>` in a sidecar file each MARK_SECONDS its log grew.

    The task writes to the descriptor directly, so the size is sampled, not counted: one thread
    per process samples every open log (an agent with many tasks still has one), and a log gets at
    most one line per second of output.
    """

    _open: ClassVar[set[_MarkedLogWriter]] = set()
    _registry_lock: ClassVar = threading.Lock()
    _sampler: ClassVar[threading.Thread | None] = None

    def __init__(self, path: Path, marks: Path) -> None:
        super().__init__(path)
        self._marks = marks
        self._marked = os.fstat(self.fileno()).st_size
        self._lock = threading.Lock()
        with self._registry_lock:
            self._open.add(self)
            if _MarkedLogWriter._sampler is None or not _MarkedLogWriter._sampler.is_alive():
                _MarkedLogWriter._sampler = threading.Thread(target=self._sample, name="log-marks", daemon=True)
                _MarkedLogWriter._sampler.start()

    def _mark(self) -> None:
        with self._lock:
            if self.closed:
                return
            size = os.fstat(self.fileno()).st_size
            if size != self._marked:
                with open(self._marks, "a", encoding="ascii") as marks:
                    marks.write(f"{size} {time.time()!r}\n")
                self._marked = size

    @classmethod
    def _sample(cls) -> None:
        while True:
            time.sleep(MARK_SECONDS)
            with cls._registry_lock:
                writers = list(cls._open)
            for writer in writers:
                with contextlib.suppress(OSError, ValueError):  # a full disk loses a mark, never the log
                    writer._mark()

    def close(self) -> None:
        with self._registry_lock:
            self._open.discard(self)
        if not self.closed:
            with contextlib.suppress(OSError, ValueError):
                self._mark()
        with self._lock:
            super().close()


def parse_marks(text: str) -> list[tuple[int, float]]:
    """`<offset> <time>` lines (a torn last line is ignored), ascending by offset."""
    marks = []
    for line in text.splitlines():
        offset, _, at = line.partition(" ")
        with contextlib.suppress(ValueError):
            marks.append((int(offset), float(at)))
    return sorted(marks)


class LogReading:
    """Reading a task's logs, attempt by attempt, with a cursor; shared by every log store backend.

    A backend provides `attempts` and `read_attempt`; the merging of attempts and the rule that
    only complete lines of a live attempt are returned live here once.
    """

    def attempts(self, job_id: str, task_index: int) -> list[int]:
        raise NotImplementedError

    def read_attempt(self, job_id: str, task_index: int, attempt: int, offset: int) -> bytes:
        raise NotImplementedError

    def attempt_marks(self, job_id: str, task_index: int, attempt: int) -> list[tuple[int, float]]:
        """`(offset, unix time)` pairs, ascending: the attempt's first `offset` bytes were written by then."""
        return []

    def attempt_end(self, job_id: str, task_index: int, attempt: int) -> tuple[int, float] | None:
        """`(size, unix time of the last write)` of an attempt's log where the backend knows it, else None."""
        return None

    def cursor_since(self, job_id: str, task_index: int, since: float) -> LogCursor:
        """A cursor past what each attempt had written before `since` (to within MARK_SECONDS), at a line start.

        Task output carries no timestamps of its own (it is kept byte for byte), so the writers note
        how far each log had grown when; a line is skipped only if it was complete before `since`.
        """
        offsets = []
        for attempt in self.attempts(job_id, task_index):
            marks = self._marks_to_end(job_id, task_index, attempt)
            start = max((offset for offset, at in marks if at < since), default=0)
            if start:  # back to the start of the line that was still being written then
                low = max(0, start - _LINE_WINDOW)
                before = self.read_attempt(job_id, task_index, attempt, low)[: start - low]
                start = low + before.rfind(b"\n") + 1 if b"\n" in before else low
            offsets.append((attempt, start))
        return LogCursor(offsets=tuple(offsets))

    def _marks_to_end(self, job_id: str, task_index: int, attempt: int) -> list[tuple[int, float]]:
        """The attempt's marks, the last one at its last byte.

        A writer killed with its agent (kill -9) leaves bytes its marks never reached; taken as
        unmarked they counted as written "now", so `--since 5s` printed minutes-old lines of a lost
        worker's attempt. They are as old as the log's last write where the backend knows it (a
        file's mtime), else as the attempt's last mark.
        """
        marks = self.attempt_marks(job_id, task_index, attempt)
        last_offset, last_at = marks[-1] if marks else (0, None)
        end = self.attempt_end(job_id, task_index, attempt)
        if end is None and last_at is not None:
            end = (last_offset + len(self.read_attempt(job_id, task_index, attempt, last_offset)), last_at)
        if end is not None and end[0] > last_offset:
            size, at = end
            marks.append((size, at if last_at is None else max(at, last_at)))
        return marks

    def read_lines(self, job_id: str, task_index: int) -> list[str]:
        """Every line of every attempt, in attempt order, without trailing newlines."""
        lines: list[str] = []
        for attempt in self.attempts(job_id, task_index):
            lines.extend(_split_lines(self.read_attempt(job_id, task_index, attempt, 0)))
        return lines

    def read_bytes(self, job_id: str, task_index: int) -> bytes:
        """Every attempt's bytes as written, in attempt order (a newline ends an attempt that lacked one)."""
        data, _ = self.read_new_bytes(job_id, task_index, None, final=True)
        return data

    def read_new(
        self, job_id: str, task_index: int, cursor: LogCursor | None = None, *, final: bool = False
    ) -> tuple[list[str], LogCursor]:
        """Lines written since ``cursor`` (all lines for None) and the cursor to pass next time.

        Only complete lines are returned from the newest attempt, since its writer may be midway
        through one; an attempt that has a successor is finished, so its unterminated last line
        is returned too, and so is the newest attempt's once the caller knows the task ended
        (``final``): a last line without a newline is output too.
        """
        data, cursor = self.read_new_bytes(job_id, task_index, cursor, final=final)
        return _split_lines(data), cursor

    def read_new_bytes(
        self, job_id: str, task_index: int, cursor: LogCursor | None = None, *, final: bool = False
    ) -> tuple[bytes, LogCursor]:
        """The bytes behind `read_new`, unchanged (no decoding, ``\r`` kept) for byte-exact output."""
        cursor = cursor or LogCursor()
        offsets = dict(cursor.offsets)
        attempts = self.attempts(job_id, task_index)
        chunks: list[bytes] = []
        for position, attempt in enumerate(attempts):
            start = offsets.get(attempt, 0)
            data = self.read_attempt(job_id, task_index, attempt, start)
            newest = position == len(attempts) - 1
            if newest and not final:
                data = data[: data.rfind(b"\n") + 1]
            offsets[attempt] = start + len(data)
            chunks.append(data)
            if data and not newest and not data.endswith(b"\n"):
                chunks.append(b"\n")  # the next attempt starts on its own line
        return b"".join(chunks), LogCursor(offsets=tuple(sorted(offsets.items())))



@dataclass(frozen=True)
class LogStore(LogReading):
    """Task logs laid out as ``<root>/<job id>/task-<index>/attempt-<n>.log``.

    One file per attempt keeps retries apart and lets a follower resume by byte offset; readers
    merge attempts in order.
    """

    root: Path

    def __post_init__(self) -> None:
        _require_absolute(self.root)

    @classmethod
    def from_url(cls, url: str) -> LogStore:
        """Open the log store named by ``url`` (``file:///abs/path`` or an absolute path)."""
        return cls(root=parse_store_url(url))

    @property
    def url(self) -> str:
        """The URL that reopens this store in another process."""
        return self.root.as_uri()

    def task_dir(self, job_id: str, task_index: int) -> Path:
        """The directory holding every attempt's log of one task."""
        if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
            raise ValueError(f"task_index must be a non-negative int, got {task_index!r}")
        components = [encode_component(job_id), f"task-{task_index}"]
        return _contained_path(self.root, components, f"log of job {job_id!r}")

    def path_for(self, job_id: str, task_index: int, attempt: int) -> Path:
        """The log file of one attempt (it may not exist yet)."""
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
            raise ValueError(f"attempt must be a non-negative int, got {attempt!r}")
        return self.task_dir(job_id, task_index) / f"{_ATTEMPT_PREFIX}{attempt}{_ATTEMPT_SUFFIX}"

    def open_writer(self, job_id: str, task_index: int, attempt: int) -> LogWriter:
        """Open (creating if needed) one attempt's log for appending; the caller closes it."""
        path = self.path_for(job_id, task_index, attempt)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogStoreError(
                f"cannot create log directory {path.parent} for job {job_id!r} task {task_index}: "
                f"{exc.strerror or exc}"
            ) from exc
        return _MarkedLogWriter(path, path.with_suffix(_MARKS_SUFFIX))

    def attempts(self, job_id: str, task_index: int) -> list[int]:
        """Attempt numbers that have a log, ascending (empty if the task has none yet)."""
        directory = self.task_dir(job_id, task_index)
        try:
            names = [entry.name for entry in directory.iterdir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise LogStoreError(f"cannot list logs in {directory}: {exc.strerror or exc}") from exc
        found = []
        for name in names:
            number = name.removeprefix(_ATTEMPT_PREFIX).removesuffix(_ATTEMPT_SUFFIX)
            if name.startswith(_ATTEMPT_PREFIX) and name.endswith(_ATTEMPT_SUFFIX) and number.isdecimal():
                found.append(int(number))
        return sorted(found)

    def read_attempt(self, job_id: str, task_index: int, attempt: int, offset: int) -> bytes:
        """One attempt's log from byte ``offset`` on (empty if it has none)."""
        return self._read_from(self.path_for(job_id, task_index, attempt), offset)

    def attempt_marks(self, job_id: str, task_index: int, attempt: int) -> list[tuple[int, float]]:
        marks = self.path_for(job_id, task_index, attempt).with_suffix(_MARKS_SUFFIX)
        return parse_marks(self._read_from(marks, 0).decode("ascii", "replace"))

    def attempt_end(self, job_id: str, task_index: int, attempt: int) -> tuple[int, float] | None:
        """The log file's size and mtime (None before it exists)."""
        try:
            status = self.path_for(job_id, task_index, attempt).stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LogStoreError(f"cannot stat log of job {job_id!r} task {task_index}: {exc.strerror or exc}") from exc
        return status.st_size, status.st_mtime

    @staticmethod
    def _read_from(path: Path, offset: int) -> bytes:
        try:
            with open(path, "rb") as log_file:
                log_file.seek(offset)
                return log_file.read()
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise LogStoreError(f"cannot read log file {path}: {exc.strerror or exc}") from exc


def last_lines(data: bytes, count: int) -> bytes:
    """The last `count` lines of `data` (an unterminated last line counts as one), bytes unchanged."""
    if count <= 0:
        return b""
    position = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        position = data.rfind(b"\n", 0, position)
        if position < 0:
            return data
    return data[position + 1:]
