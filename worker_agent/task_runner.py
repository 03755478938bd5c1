"""Run one shipped callable: ``python -m worker_agent.task_runner --store URL --function KEY --result KEY``.

Why a separate process: the user's code runs in its own interpreter and process group (a fresh
one, or one forked from the process runtime's warm ``forkserver``), so the agent can kill it (and
everything it spawned) without harming itself, and a crash, a leak or a ``sys.exit`` in user code
stays the task's problem.

Contract with the agent (see ``task_runner_argv``, ``read_result``, ``read_task_error``):

- the function blob holds ``cloudpickle.dumps((fn, args, kwargs))`` (``iris.client.code_shipping``);
- on success the pickled return value is stored under the result key and the exit code is 0
  (a returned coroutine is run to completion with ``asyncio.run``);
- on failure a one-line reason is stored under ``<result key>.error``, the full traceback goes
  to stderr (the task's log) and the exit code is 1. An exit by signal leaves no error blob.

Imports are kept to what reaching the function needs: a fresh interpreter (every container task,
or the process runtime before its forkserver is ready) pays for them on every attempt, under the
task's CPU limit. So the command line is read without argparse, the store's files are reached
through ``blob_files`` (``os`` only), the call is unpickled by ``shipped_call`` (cloudpickle only if
the payload needs more than its function helpers), a plain result is pickled without cloudpickle,
and ``traceback`` is imported only on failure. This module imports nothing else at its top, not
even ``typing``: keep it so (``tests/worker_agent/test_task_runner.py`` checks it).

Once the outcome is stored, the process ends the way the standard library's forked workers do
(``end_process``): non-daemon threads are joined, ``atexit`` handlers run, stdio is flushed, and the
interpreter's own teardown is skipped. That teardown cost 10-40 ms of the task's CPU per attempt
(in a forked child it also copies the pages it shares with the forkserver); what it would add is
finalizing objects still alive at exit, which Python does not promise anyway (close your files).
"""

from __future__ import annotations

import _collections_abc  # collections.abc without the collections package: loaded at start-up by os
import os
import sys

from worker_agent.blob_files import (
    BlobNotFoundError,
    StorageError,
    blob_path,
    delete_blob,
    read_blob,
    store_root,
    write_blob,
)
from worker_agent.shipped_call import dump_result, load_call

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~9 ms of a fresh interpreter's CPU)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Final, NoReturn

    from worker_agent.object_store import Blobs
    from worker_agent.storage import BlobStore

__all__ = [
    "ERROR_SUFFIX",
    "end_process",
    "error_key",
    "main",
    "parse_args",
    "read_result",
    "read_task_error",
    "task_runner_argv",
]

ERROR_SUFFIX: Final = ".error"
OPTIONS: Final = ("--store", "--function", "--result")
USAGE: Final = "usage: python -m worker_agent.task_runner --store URL --function KEY --result KEY"
EXIT_USAGE: Final = 2
_MAX_ERROR_CHARS: Final = 1000
EXIT_FAILURE: Final = 1


def error_key(result_key: str) -> str:
    """The blob key where a failed run stores its one-line reason."""
    return result_key + ERROR_SUFFIX


def task_runner_argv(
    store_url: str, function_key: str, result_key: str, python: str | None = None
) -> list[str]:
    """The command line that runs one shipped callable (``python`` defaults to this interpreter)."""
    return [
        python or sys.executable,
        "-m",
        "worker_agent.task_runner",
        "--store",
        store_url,
        "--function",
        function_key,
        "--result",
        result_key,
    ]


def read_task_error(store: Blobs, result_key: str) -> str | None:
    """The one-line failure reason a run left, or None if it left none."""
    try:
        return store.get(error_key(result_key)).decode("utf-8", "replace")
    except BlobNotFoundError:
        return None


def read_result(store: BlobStore, result_key: str) -> Any:
    """The unpickled return value of a successful run; BlobNotFoundError if there is none."""
    import cloudpickle

    return cloudpickle.loads(store.get(result_key))


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` on one line, bounded, e.g. ``ZeroDivisionError: division by zero``."""
    try:
        message = " ".join(str(exc).split())
    except Exception:  # a user exception whose __str__ itself fails
        message = "<unprintable message>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


class _TaskRunError(Exception):
    """Internal: a run failed for ``reason``; the traceback of the cause is already known."""

    def __init__(self, reason: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code  # what the process exits with: a sys.exit(N)'s N, else 1


def _load_call(path: str, function_key: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    try:
        payload = read_blob(path, function_key)
    except BlobNotFoundError as exc:
        raise _TaskRunError(f"task function blob is missing: {exc}") from exc
    except StorageError as exc:
        raise _TaskRunError(f"cannot read the task function blob: {exc}") from exc
    try:
        call = load_call(payload)
    except Exception as exc:
        raise _TaskRunError(f"cannot unpickle the task's function: {describe_exception(exc)}") from exc
    if not (
        isinstance(call, tuple)
        and len(call) == 3
        and callable(call[0])
        and isinstance(call[1], tuple | list)
        and isinstance(call[2], dict)
    ):
        raise _TaskRunError(
            f"task function blob is malformed: expected (fn, args, kwargs), got {type(call).__name__}"
        )
    fn, args, kwargs = call
    return fn, tuple(args), kwargs


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        value = fn(*args, **kwargs)
        if isinstance(value, _collections_abc.Coroutine):
            import asyncio  # only async tasks pay for importing asyncio

            value = asyncio.run(value)
    except SystemExit as exc:
        if exc.code in (None, 0):
            return None
        code = exc.code if isinstance(exc.code, int) and 0 < exc.code < 256 else EXIT_FAILURE
        raise _TaskRunError(f"task called sys.exit({exc.code!r})", code) from exc
    except BaseException as exc:
        raise _TaskRunError(describe_exception(exc)) from exc
    return value


class _Paths:
    """The files of one run in the task's own store: the function, the result, the failure note."""

    def __init__(self, store_url: str, function_key: str, result_key: str) -> None:
        root = store_root(store_url)  # a malformed URL or key fails here, before any user code runs
        self.function_key, self.result_key, self.error_key = function_key, result_key, error_key(result_key)
        self.function = blob_path(root, function_key)
        self.result = blob_path(root, result_key)
        self.error = blob_path(root, self.error_key)


def run(paths: _Paths) -> None:
    """Load, call and store the result of one shipped callable; raise _TaskRunError on failure."""
    delete_blob(paths.error, paths.error_key)  # a stale reason from an earlier run must not linger
    fn, args, kwargs = _load_call(paths.function, paths.function_key)
    value = _call(fn, args, kwargs)
    try:
        data = dump_result(value)
    except Exception as exc:
        raise _TaskRunError(f"cannot pickle the task's return value: {describe_exception(exc)}") from exc
    try:
        # The attempt's own area, which the agent copies to the shared store durably: no fsync here.
        write_blob(paths.result, paths.result_key, data, durable=False)
    except StorageError as exc:
        raise _TaskRunError(f"cannot store the task's result: {exc}") from exc


def parse_args(argv: Sequence[str]) -> dict[str, str] | str:
    """The values of ``--store``, ``--function`` and ``--result`` (``--x V`` or ``--x=V``), or what is wrong."""
    values: dict[str, str] = {}
    rest = list(argv)
    while rest:
        name, sep, value = rest.pop(0).partition("=")
        if name not in OPTIONS:
            return f"unknown argument {name!r}"
        if not sep:
            if not rest:
                return f"{name} needs a value"
            value = rest.pop(0)
        values[name] = value
    missing = [name for name in OPTIONS if name not in values]
    return f"missing {', '.join(missing)}" if missing else values


def main(argv: Sequence[str] | None = None) -> int:
    """Run the callable named on the command line; 0 on success, 1 after recording the failure."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if isinstance(args, str):
        print(f"{USAGE}\niris task runner: {args}", file=sys.stderr)
        return EXIT_USAGE
    try:
        paths = _Paths(args["--store"], args["--function"], args["--result"])
    except (ValueError, StorageError) as exc:
        print(f"iris task runner: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        run(paths)
    except (_TaskRunError, StorageError) as failure:
        import traceback

        reason = failure.reason if isinstance(failure, _TaskRunError) else str(failure)
        traceback.print_exception(failure.__cause__ or failure, file=sys.stderr)
        print(f"iris task failed: {reason}", file=sys.stderr)
        try:
            write_blob(paths.error, paths.error_key, reason.encode("utf-8", "replace"), durable=False)
        except StorageError as exc:
            print(f"iris task runner: cannot record the failure: {exc}", file=sys.stderr)
        return failure.exit_code if isinstance(failure, _TaskRunError) else EXIT_FAILURE
    finally:
        sys.stdout.flush()
    return 0


def end_process(code: int) -> NoReturn:
    """Join non-daemon threads, run atexit handlers, flush stdio, then end the process with ``code``."""
    import atexit

    threading = sys.modules.get("threading")  # no threading module, no threads of its kind to join
    if threading is not None:
        threading._shutdown()  # type: ignore[attr-defined]  # what interpreter exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib.suppress would cost an import
            stream.flush()
        except (OSError, ValueError):  # closed or broken by the task
            pass
    os._exit(code)


if __name__ == "__main__":
    end_process(main())
