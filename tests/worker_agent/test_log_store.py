"""Tests for LogStore: per-attempt layout, whole reads, follow-mode reads and write errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker_agent.storage import LogCursor, LogStore, LogStoreError, LogWriter


def _write(store: LogStore, attempt: int, data: bytes, job_id: str = "job-1", task_index: int = 0) -> None:
    with store.open_writer(job_id, task_index, attempt) as writer:
        writer.write(data)


def test_read_lines_merges_attempts_in_order(log_store: LogStore) -> None:
    """All attempts' lines come back in attempt order without newlines, partial tail included."""
    _write(log_store, 0, b"a0\na1\n")
    _write(log_store, 1, b"b0\r\nb1")
    _write(log_store, 0, b"a2\n")
    assert log_store.read_lines("job-1", 0) == ["a0", "a1", "a2", "b0", "b1"]


def test_read_lines_of_an_unknown_task_is_empty(log_store: LogStore) -> None:
    """A task that never logged has no lines and no attempts."""
    assert log_store.read_lines("nobody", 3) == []
    assert log_store.attempts("nobody", 3) == []


def test_attempts_sort_numerically_and_ignore_other_files(log_store: LogStore) -> None:
    """attempt-10 comes after attempt-2 and stray files are not attempts."""
    for attempt in (10, 2, 0):
        _write(log_store, attempt, b"x\n")
    (log_store.task_dir("job-1", 0) / "notes.txt").write_text("stray")
    (log_store.task_dir("job-1", 0) / "attempt-x.log").write_text("stray")
    assert log_store.attempts("job-1", 0) == [0, 2, 10]


def test_read_new_returns_only_complete_lines(log_store: LogStore) -> None:
    """A follower sees a line only once its newline is written, and never twice."""
    writer = log_store.open_writer("job-1", 0, 0)
    writer.write(b"one\ntw")
    lines, cursor = log_store.read_new("job-1", 0, None)
    assert lines == ["one"]
    assert ([], cursor) == log_store.read_new("job-1", 0, cursor)
    writer.write(b"o\nthree\n")
    lines, cursor = log_store.read_new("job-1", 0, cursor)
    assert lines == ["two", "three"]
    assert cursor.offset(0) == 14
    writer.close()


def test_read_new_picks_up_new_attempts_and_finishes_old_ones(log_store: LogStore) -> None:
    """When attempt 1 appears, attempt 0's unterminated last line is complete and is returned."""
    _write(log_store, 0, b"first\ncrashed mid-li")
    lines, cursor = log_store.read_new("job-1", 0)
    assert lines == ["first"]
    _write(log_store, 1, b"retry\n")
    lines, cursor = log_store.read_new("job-1", 0, cursor)
    assert lines == ["crashed mid-li", "retry"]
    assert cursor.offsets == ((0, 20), (1, 6))


def test_read_new_decodes_invalid_utf8_with_replacement(log_store: LogStore) -> None:
    """Binary garbage in a log is readable text, not a crash."""
    _write(log_store, 0, b"ok \xff\xfe\n")
    assert log_store.read_new("job-1", 0)[0] == ["ok \ufffd\ufffd"]


@pytest.mark.parametrize("offsets", [((1, 0), (0, 0)), ((0, 0), (0, 5)), ((0, -1),), ((-1, 0),)])
def test_log_cursor_validates_offsets(offsets: tuple[tuple[int, int], ...]) -> None:
    """A cursor's attempts are unique and increasing and nothing is negative."""
    with pytest.raises(ValueError):
        LogCursor(offsets=offsets)


@pytest.mark.parametrize("job_id", ["../../escape", "/etc", "..", "a/b", "$(touch pwned)", "x\x00y"])
def test_hostile_job_ids_stay_inside_the_root(log_store: LogStore, job_id: str) -> None:
    """A job id is one encoded directory under the root whatever it contains."""
    _write(log_store, 0, b"hi\n", job_id=job_id)
    path = log_store.path_for(job_id, 0, 0)
    assert path.resolve().is_relative_to(log_store.root.resolve())
    assert len(list(log_store.root.iterdir())) == 1
    assert log_store.read_lines(job_id, 0) == ["hi"]


@pytest.mark.parametrize(("task_index", "attempt"), [(-1, 0), (0, -1), (True, 0)])
def test_indices_must_be_non_negative_ints(log_store: LogStore, task_index: int, attempt: int) -> None:
    """Negative or boolean task indices and attempts are rejected."""
    with pytest.raises(ValueError):
        log_store.path_for("job", task_index, attempt)


def test_unwritable_location_is_a_log_store_error(tmp_path: Path) -> None:
    """A log root below a regular file fails to open with a LogStoreError naming the job."""
    (tmp_path / "file").write_text("not a directory")
    store = LogStore.from_url(str(tmp_path / "file" / "logs"))
    with pytest.raises(LogStoreError, match=r"cannot create log directory .* for job 'job-1' task 0"):
        store.open_writer("job-1", 0, 0)


def test_disk_full_is_a_log_store_error() -> None:
    """A write that hits ENOSPC (/dev/full) raises LogStoreError, not a bare OSError."""
    writer = LogWriter(Path("/dev/full"))
    with pytest.raises(LogStoreError, match="cannot write log file /dev/full: No space left on device"):
        writer.write(b"x" * 10)
    writer.close()


def test_open_of_a_missing_file_system_path_is_a_log_store_error(tmp_path: Path) -> None:
    """Opening a log where the directory vanished is a LogStoreError."""
    with pytest.raises(LogStoreError, match="cannot open log file"):
        LogWriter(tmp_path / "missing" / "attempt-0.log")


def test_writer_is_a_real_file_for_subprocesses(log_store: LogStore) -> None:
    """The writer has a descriptor, appends, and the agent can add its own lines."""
    with log_store.open_writer("job-1", 0, 0) as writer:
        assert writer.fileno() >= 0
        os.write(writer.fileno(), b"from a child\n")
        writer.write(b"[iris] attempt ended\n")
    assert log_store.read_lines("job-1", 0) == ["from a child", "[iris] attempt ended"]
