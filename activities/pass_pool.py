"""A process of its own for big scheduling passes, so they do not hold the controller's GIL.

Why: a pass at 10,000 workers x 100,000 pending tasks is ~1 s of pure-Python CPU. Run in a thread
of the controller, it holds the GIL while the scheduler workflow's tasks run in the same process,
and those took about twice their CPU time in wall time. In a child process the pass only shares
the machine's cores.

One long-lived child per controller process (`max_workers=1`: passes are one at a time anyway),
started with `spawn` (a multi-threaded process is never forked). It is started by the first
snapshot of `PASS_PROCESS_MIN_BYTES` or more (uncompressed); the passes of small clusters run in the activity's
thread, so a small cluster never starts the child nor waits for it.
The child exits within `WATCH_SECONDS` when its parent is gone, even a SIGKILLed one. As with any
`spawn`, the child imports the parent's main module: a script that serves a controller needs the
`if __name__ == "__main__":` guard (`iris controller serve` and the benches have it).
"""

from __future__ import annotations

import concurrent.futures
import gc
import importlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TypeVar

import structlog

from activities.proto import compressed

T = TypeVar("T")

log = structlog.get_logger("activities.pass_pool")

MIN_BYTES_ENV = "IRIS_PASS_PROCESS_MIN_BYTES"
PASS_PROCESS_MIN_BYTES = 256 * 1024
"""Snapshots this big or bigger, uncompressed, are scheduled in the child: in the scale bench's shape, ~2,000 workers
with 20,000 tasks queued (~280 KB), a pass of ~0.1 s of CPU. Uncompressed, because how well a snapshot compresses
depends on its contents and on the compression (~3 KB of zstd per 100 KB of snapshot, ~7 KB of zlib). Smaller
passes cost little GIL and a small cluster's controller never starts the child (~0.5 s of CPU, ~60 MB). Set
MIN_BYTES_ENV to 0 to send every pass to the child (tests), or to "off" to keep every pass in-process."""
WATCH_SECONDS = 0.5  # how often the child checks that its parent lives
RETRY_START_SECONDS = 60.0  # after a child failed to start, passes run in-process this long before a new try
POLL_SECONDS = 0.25  # how often the waiting thread wakes: a cancellation is raised in it between waits


class PassProcessError(RuntimeError):
    """The child died mid-pass (killed, out of memory): the activity fails and Temporal retries it on a fresh one."""


def min_bytes() -> int | None:
    """The snapshot size from which passes go to the child; None when they never do."""
    value = os.environ.get(MIN_BYTES_ENV, "").strip()
    if not value:
        return PASS_PROCESS_MIN_BYTES
    if value.lower() == "off":
        return None
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(f"{MIN_BYTES_ENV}: {value!r} is not a number of bytes or 'off'") from None


def _child_init(parent: int, gc_thresholds: tuple[int, int, int]) -> None:
    """In the child: exit when the parent is gone, collect garbage as the parent does, leave ^C to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.set_threshold(*gc_thresholds)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_SECONDS)
        os._exit(0)  # re-parented: the controller died without stopping us

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _ready(module: str) -> int:
    """Run in the child once, to start it: imports the pass's module (~0.5 s of CPU) before any pass; its pid."""
    if module:
        importlib.import_module(module)
    return os.getpid()


class PassPool:
    """The controller's pass process: started on demand, replaced when it dies, stopped with the controller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._started: concurrent.futures.Future[int] | None = None
        self._retry_at = 0.0  # (monotonic) when to start a child again after one failed to start

    def available(self) -> bool:
        """False for RETRY_START_SECONDS after a child failed to start: passes run in the caller meanwhile."""
        return time.monotonic() >= self._retry_at

    def pid(self) -> int | None:
        """The child's pid once it is up (for tests and figures)."""
        started = self._started
        return started.result() if started is not None and started.done() and not started.exception() else None

    def run(self, fn: Callable[[bytes], T], data: bytes) -> T:
        """`fn(data)` in the child; the first call starts it (importing `fn`'s module there) and waits for it.

        PassProcessError when the child dies meanwhile or does not start (the next call starts a fresh one).
        When the waiting thread is interrupted (the activity is cancelled or timed out), the child is stopped
        with the pass.
        """
        with self._lock:
            if self._executor is None or self._started is None:
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_child_init, initargs=(os.getpid(), gc.get_threshold()),
                )  # fmt: skip
                self._started = self._executor.submit(_ready, fn.__module__)
            executor, started = self._executor, self._started
        try:
            _wait(started)
        except BrokenProcessPool as err:
            self._drop(executor)
            self._retry_at = time.monotonic() + RETRY_START_SECONDS
            log.warning("pass_process_failed_to_start", error=str(err))
            raise PassProcessError(f"the scheduling pass's process did not start: {err}") from err
        except BaseException:
            self._drop(executor)
            raise
        try:
            return _wait(executor.submit(fn, data))
        except BrokenProcessPool as err:
            self._drop(executor)
            log.warning("pass_process_died", error=str(err))
            raise PassProcessError("the scheduling pass's process died; the pass is retried in a fresh one") from err
        except BaseException:
            self._drop(executor)  # e.g. cancelled: the pass's CPU is not spent for nothing
            raise

    def shutdown(self) -> None:
        """Stop the child (a pass it runs is abandoned); the next pass starts a fresh one."""
        with self._lock:
            executor = self._executor
        if executor is not None:
            self._drop(executor)

    def _drop(self, executor: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is executor:
                self._executor = self._started = None
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            if process.is_alive():
                process.kill()
        executor.shutdown(wait=True, cancel_futures=True)


def _wait(future: concurrent.futures.Future[T]) -> T:
    """The future's result, waited for in short waits so an exception raised into this thread gets in."""
    while True:
        try:
            return future.result(timeout=POLL_SECONDS)
        except concurrent.futures.TimeoutError:
            continue


POOL = PassPool()
"""The controller process's one pass process."""


def run_pass(fn: Callable[[bytes], T], snapshot: bytes) -> T:
    """`fn(snapshot)`: in the child when the snapshot is big enough, else here.

    The first big pass waits for the child to start (~0.5 s of CPU, ~1 s on a loaded machine): once per
    controller, and only in a cluster whose passes take a good part of that anyway.
    """
    least = min_bytes()
    if least is not None and compressed.content_size(snapshot) >= least and POOL.available():
        return POOL.run(fn, snapshot)
    return fn(snapshot)


@contextmanager
def pass_process() -> Iterator[PassPool]:
    """The controller's pass process for as long as it serves; stopped (not left behind) on the way out.

    ValueError at once when MIN_BYTES_ENV is set to something that is not a size.
    """
    min_bytes()
    try:
        yield POOL
    finally:
        POOL.shutdown()
