"""`--since` and `--tail` on task logs, on both log store backends (a directory and an object store)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.cli.log_output import LogFollower, LogPrinter, last_lines
from worker_agent.object_store import Logs, ObjectLogStore
from worker_agent.storage import LogStore


@pytest.fixture(params=["directory", "object"])
def logs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Logs]:
    if request.param == "directory":
        yield LogStore(tmp_path / "logs")
    else:
        import fsspec

        yield ObjectLogStore(f"memory://logs-{time.monotonic_ns()}")
        fsspec.filesystem("memory").store.clear()


def _between() -> float:
    """A moment strictly after what was written so far and before what comes next (object names hold ms)."""
    time.sleep(0.005)
    moment = time.time()
    time.sleep(0.005)
    return moment


def _write(logs: Logs, attempt: int, data: bytes) -> None:
    with logs.open_writer("job", 0, attempt) as writer:
        writer.write(data)


def test_since_skips_lines_written_before_it(logs: Logs) -> None:
    """Lines complete before `since` are skipped, across attempts; later ones are all there."""
    _write(logs, 0, b"old-0\nold-1\n")
    _write(logs, 1, b"old-2\n")
    middle = _between()
    _write(logs, 1, b"new-0\n")
    _write(logs, 2, b"new-1\n")
    data, _ = logs.read_new_bytes("job", 0, logs.cursor_since("job", 0, middle), final=True)
    assert b"new-0\nnew-1\n" == data


def test_since_before_everything_or_after_everything(logs: Logs) -> None:
    """A `since` before the first line gives the whole log; one after the last gives nothing."""
    before = time.time() - 60
    _write(logs, 0, b"a\nb\n")
    whole, _ = logs.read_new_bytes("job", 0, logs.cursor_since("job", 0, before), final=True)
    nothing, _ = logs.read_new_bytes("job", 0, logs.cursor_since("job", 0, time.time() + 60), final=True)
    assert (b"a\nb\n", b"") == (whole, nothing)


def test_since_never_starts_inside_a_line(logs: Logs) -> None:
    """A line begun before `since` and finished after it is printed whole."""
    _write(logs, 0, b"done\nhalf ")
    middle = _between()
    _write(logs, 0, b"line\nnext\n")
    data, _ = logs.read_new_bytes("job", 0, logs.cursor_since("job", 0, middle), final=True)
    assert b"half line\nnext\n" == data


def test_tail_keeps_the_last_lines_of_each_task(logs: Logs, tmp_path: Path) -> None:
    """`tail` applies per task to what is there at first; what comes later is printed whole."""
    _write(logs, 0, b"1\n2\n3\n")
    out = tmp_path / "out"
    with open(out, "wb") as stream:
        follower = LogFollower(logs, "job", LogPrinter(stream, prefix=False), [0], tail=2)
        follower.poll(1)
        _write(logs, 0, b"4\n5\n")
        follower.poll(1, final=True)
    assert b"2\n3\n4\n5\n" == out.read_bytes()


@pytest.mark.parametrize(
    ("data", "count", "expected"),
    [(b"a\nb\nc\n", 2, b"b\nc\n"), (b"a\nb\nc", 2, b"b\nc"), (b"a\n", 5, b"a\n"), (b"a\nb\n", 0, b""), (b"", 3, b"")],
)
def test_last_lines(data: bytes, count: int, expected: bytes) -> None:
    """The last N lines, bytes unchanged, an unterminated last line counting as one."""
    assert expected == last_lines(data, count)


class _NoMtimeLogStore(LogStore):
    """A directory store that, like a backend without file times, cannot say when a log last grew."""

    def attempt_end(self, job_id: str, task_index: int, attempt: int) -> tuple[int, float] | None:
        return None


@pytest.mark.parametrize("store_class", [LogStore, _NoMtimeLogStore])
def test_since_treats_lines_past_the_times_index_as_old(store_class: type[LogStore], tmp_path: Path) -> None:
    """A lost worker's attempt (times index cut short by kill -9): `--since` recent skips its unmarked lines."""
    logs = store_class(tmp_path / "logs")
    path = logs.path_for("job", 0, 0)
    path.parent.mkdir(parents=True)
    marked = b"".join(b"marked line %d\n" % i for i in range(6))
    path.write_bytes(marked + b"".join(b"unmarked line %d\n" % i for i in range(5)))
    stamp = time.time() - 70
    path.with_suffix(".times").write_text(f"{len(marked) // 2} {stamp - 1!r}\n{len(marked)} {stamp!r}\n")
    os.utime(path, (stamp + 5, stamp + 5))  # the agent died 65 s ago, with its last lines unmarked
    recent, _ = logs.read_new_bytes("job", 0, logs.cursor_since("job", 0, time.time() - 5), final=True)
    older, _ = logs.read_new_bytes("job", 0, logs.cursor_since("job", 0, stamp - 30), final=True)
    assert (b"", path.read_bytes()) == (recent, older)
