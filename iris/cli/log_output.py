"""Task logs on the user's terminal or pipe: the task's bytes unchanged, prefixes only where they help.

Logs are written as bytes straight to the output stream (no rich, no wrapping, no
decoding), so `iris job logs J > out.txt` reproduces what the task wrote, tabs, wide
characters and long lines included, at the speed of a copy. On a terminal (or when
asked) each line gets its task index, `[i] `, in front; never inside a line.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from worker_agent.storage import LogCursor, last_lines

if TYPE_CHECKING:
    from worker_agent.object_store import Logs


class _TextSink:
    """Bytes written to a text-only stream (a notebook's stdout has no `.buffer`), decoded as UTF-8."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self.stream.flush()


def _binary(stream: IO[Any]) -> Any:
    """The byte stream under a text stream (sys.stdout.buffer), the stream itself if it takes bytes, else a sink."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        return buffer
    if isinstance(stream, io.TextIOBase) or not hasattr(stream, "readinto"):
        try:
            stream.write(b"")
        except TypeError:
            return _TextSink(stream)
    return stream


class LogPrinter:
    """Writes chunks of task output, prefixed with `[i] ` per line when `prefix` (default: on a terminal)."""

    def __init__(self, stream: IO[Any], prefix: bool | None = None) -> None:
        self._text = stream
        self._out = _binary(stream)
        if prefix is None:
            try:
                prefix = bool(stream.isatty())
            except (AttributeError, ValueError):
                prefix = False
        self.prefix = prefix
        self._open_line: int | None = None
        """The task whose last chunk ended mid-line (no newline yet), if any."""

    def write(self, task_index: int, data: bytes) -> None:
        """Output `data` written by task `task_index`; an unterminated line is finished before another task's."""
        if not data:
            return
        if self._open_line is not None and self._open_line != task_index:
            self._out.write(b"\n")
            self._open_line = None
        if self.prefix:
            label = f"[{task_index}] ".encode()
            lines = data.split(b"\n")
            tail = lines.pop()  # b"" when data ends with a newline
            body = b"".join(
                (b"" if (n == 0 and self._open_line == task_index) else label) + line + b"\n"
                for n, line in enumerate(lines)
            )
            if tail:
                body += (b"" if (not lines and self._open_line == task_index) else label) + tail
            data = body
        self._out.write(data)
        self._open_line = None if data.endswith(b"\n") else task_index

    def end(self) -> None:
        """Finish an unterminated last line on a terminal (a pipe gets the bytes exactly as written)."""
        if self._open_line is not None and self.prefix:
            self._out.write(b"\n")
            self._open_line = None
        self.flush()

    def flush(self) -> None:
        self._out.flush()

    def __enter__(self) -> LogPrinter:
        self._text.flush()  # text already written to the stream goes first
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


class LogFollower:
    """Prints what each task of a job wrote since the last poll; `final` flushes unterminated last lines.

    `since` (unix time) starts each task's log at the first line written then or later; `tail` keeps
    only each task's last `tail` lines of what is there at the first poll (later polls print all).
    """

    def __init__(
        self, logs: Logs, job_id: str, printer: LogPrinter, tasks: Sequence[int] | None = None,
        *, since: float | None = None, tail: int | None = None,
    ) -> None:
        self.logs = logs
        self.job_id = job_id
        self.printer = printer
        self.tasks = list(tasks) if tasks is not None else None
        self.since = since
        self.tail = tail
        self._cursors: dict[int, LogCursor | None] = {}

    def poll(self, num_tasks: int, *, final: bool = False) -> None:
        """Print new output of the followed tasks (all `num_tasks` unless a subset was given)."""
        for i in self.tasks if self.tasks is not None else range(num_tasks):
            first = i not in self._cursors
            cursor = self._cursors.get(i)
            if first and self.since is not None:
                cursor = self.logs.cursor_since(self.job_id, i, self.since)
            data, self._cursors[i] = self.logs.read_new_bytes(self.job_id, i, cursor, final=final)
            if first and self.tail is not None:
                data = last_lines(data, self.tail)
            self.printer.write(i, data)
        self.printer.flush()
        if final:
            self.printer.end()
