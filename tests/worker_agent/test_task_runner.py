"""Tests for the task runner: results, one-line error blobs, and exit codes, in and out of process."""

from __future__ import annotations

import asyncio
import operator
import sys
from typing import Any

import cloudpickle
import pytest

from worker_agent.runtimes.base import TaskSpec
from worker_agent.runtimes.process import ProcessRuntime
from worker_agent.storage import BlobNotFoundError, BlobStore, LogStore
from worker_agent.task_runner import error_key, main, read_result, read_task_error, task_runner_argv


def _ship(store: BlobStore, fn: Any, *args: Any, **kwargs: Any) -> None:
    store.put("job/fn", cloudpickle.dumps((fn, args, kwargs)))


def _run(store: BlobStore) -> int:
    return main(["--store", store.url, "--function", "job/fn", "--result", "job/result"])


async def _async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def _divide(a: int, b: int) -> float:
    return a / b


def _exit(code: int | None) -> None:
    sys.exit(code)


def _multi_line_error() -> None:
    raise RuntimeError("first line\nsecond line")


def test_success_stores_the_return_value(blob_store: BlobStore) -> None:
    """A returned value is pickled under the result key and no error blob exists."""
    _ship(blob_store, divmod, 17, 5)
    assert _run(blob_store) == 0
    assert read_result(blob_store, "job/result") == (3, 2)
    assert read_task_error(blob_store, "job/result") is None


def test_keyword_arguments_are_passed(blob_store: BlobStore) -> None:
    """kwargs from the blob reach the function."""
    _ship(blob_store, sorted, [3, 1, 2], reverse=True)
    assert _run(blob_store) == 0
    assert read_result(blob_store, "job/result") == [3, 2, 1]


def test_coroutine_results_are_awaited(blob_store: BlobStore) -> None:
    """An async function's coroutine is run to completion with asyncio.run."""
    _ship(blob_store, _async_add, 20, 22)
    assert _run(blob_store) == 0
    assert read_result(blob_store, "job/result") == 42


def test_exception_gives_one_line_error_and_traceback(
    blob_store: BlobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A raised exception exits 1 with 'Type: message' stored and the traceback on stderr."""
    _ship(blob_store, _divide, 1, 0)
    assert _run(blob_store) == 1
    assert read_task_error(blob_store, "job/result") == "ZeroDivisionError: division by zero"
    stderr = capsys.readouterr().err
    assert "Traceback (most recent call last)" in stderr
    assert "in _divide" in stderr
    assert not blob_store.exists("job/result")


def test_multi_line_messages_are_flattened(blob_store: BlobStore) -> None:
    """The stored reason is a single line."""
    _ship(blob_store, _multi_line_error)
    assert _run(blob_store) == 1
    assert read_task_error(blob_store, "job/result") == "RuntimeError: first line second line"


def test_missing_function_blob(blob_store: BlobStore) -> None:
    """A missing function blob is reported as missing, with where it was looked for."""
    assert _run(blob_store) == 1
    error = read_task_error(blob_store, "job/result")
    assert error is not None
    assert error.startswith("task function blob is missing: blob 'job/fn' is missing: no file at ")


def test_corrupt_function_blob(blob_store: BlobStore) -> None:
    """Bytes that are not a pickle are reported as an unpickling failure."""
    blob_store.put("job/fn", b"this is not a pickle")
    assert _run(blob_store) == 1
    error = read_task_error(blob_store, "job/result")
    assert error is not None
    assert error.startswith("cannot unpickle the task's function: UnpicklingError")


def test_malformed_payload(blob_store: BlobStore) -> None:
    """A pickle that is not (fn, args, kwargs) is reported as malformed."""
    blob_store.put("job/fn", cloudpickle.dumps({"not": "a call"}))
    assert _run(blob_store) == 1
    assert (
        read_task_error(blob_store, "job/result")
        == "task function blob is malformed: expected (fn, args, kwargs), got dict"
    )


def test_unpicklable_return_value(blob_store: BlobStore) -> None:
    """A result that cannot be pickled is a failure that says so."""
    _ship(blob_store, eval, "(x for x in [])")
    assert _run(blob_store) == 1
    error = read_task_error(blob_store, "job/result")
    assert error is not None
    assert error.startswith("cannot pickle the task's return value: TypeError")


@pytest.mark.parametrize(("code", "expected_exit"), [(None, 0), (0, 0), (3, 3), ("bye", 1), (300, 1)])
def test_sys_exit_in_the_task(blob_store: BlobStore, code: int | None, expected_exit: int) -> None:
    """sys.exit(0) is a success with result None; any other sys.exit is a failure, exiting N as Python would
    for sys.exit(N) (1 for a message or a code a process cannot exit with)."""
    _ship(blob_store, _exit, code)
    assert expected_exit == _run(blob_store)
    if expected_exit == 0:
        assert read_result(blob_store, "job/result") is None
    else:
        assert f"task called sys.exit({code!r})" == read_task_error(blob_store, "job/result")


def test_stale_error_is_cleared_by_a_successful_run(blob_store: BlobStore) -> None:
    """An error blob from an earlier run with the same key does not survive a success."""
    blob_store.put(error_key("job/result"), b"old failure")
    _ship(blob_store, abs, -4)
    assert _run(blob_store) == 0
    assert read_task_error(blob_store, "job/result") is None


def test_read_result_of_a_missing_result(blob_store: BlobStore) -> None:
    """Reading a result that was never written is a BlobNotFoundError."""
    with pytest.raises(BlobNotFoundError):
        read_result(blob_store, "job/result")


def test_bad_store_url_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """An unsupported store URL is reported on stderr with exit code 1."""
    assert main(["--store", "gs://bucket", "--function", "f", "--result", "r"]) == 1
    assert "unsupported store URL scheme 'gs'" in capsys.readouterr().err


async def test_runs_under_the_process_runtime(
    runtime: ProcessRuntime, blob_store: BlobStore, log_store: LogStore
) -> None:
    """The agent's path: task_runner_argv under ProcessRuntime, prints in the log, result readable."""
    _ship(blob_store, print, "hello from the task")
    log = log_store.open_writer("job", 0, 0)
    task = await runtime.start(
        TaskSpec(argv=task_runner_argv(blob_store.url, "job/fn", "job/result"), log=log)
    )
    assert (await asyncio.wait_for(runtime.wait(task), 30)).exit_code == 0
    log.close()
    assert log_store.read_lines("job", 0) == ["hello from the task"]
    assert read_result(blob_store, "job/result") is None


async def test_failure_under_the_process_runtime_logs_the_traceback(
    runtime: ProcessRuntime, blob_store: BlobStore, log_store: LogStore
) -> None:
    """A failing task exits 1 in a subprocess with its traceback in the log and the reason stored."""
    _ship(blob_store, operator.truediv, 1, 0)  # importable in the subprocess
    log = log_store.open_writer("job", 0, 0)
    task = await runtime.start(
        TaskSpec(argv=task_runner_argv(blob_store.url, "job/fn", "job/result"), log=log)
    )
    assert (await asyncio.wait_for(runtime.wait(task), 30)).exit_code == 1
    log.close()
    lines = log_store.read_lines("job", 0)
    assert "Traceback (most recent call last):" in lines
    assert lines[-1] == "iris task failed: ZeroDivisionError: division by zero"
    assert read_task_error(blob_store, "job/result") == "ZeroDivisionError: division by zero"


def test_malformed_key_exits_1(blob_store: BlobStore, capsys: pytest.CaptureFixture[str]) -> None:
    """A result key with an empty component is rejected before anything runs."""
    assert main(["--store", blob_store.url, "--function", "job/fn", "--result", "job//r"]) == 1
    assert "empty path component" in capsys.readouterr().err


def test_unprintable_exception_is_still_reported(blob_store: BlobStore) -> None:
    """An exception whose __str__ fails still yields a one-line reason."""
    _ship(blob_store, _raise_unprintable)
    assert _run(blob_store) == 1
    assert read_task_error(blob_store, "job/result") == "_UnprintableError: <unprintable message>"


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def _raise_unprintable() -> None:
    raise _UnprintableError()
