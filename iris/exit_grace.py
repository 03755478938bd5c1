"""Leaving a process that used a Temporal client: close what is open, then give the SDK's threads a moment.

The Temporal SDK completes each call on a thread of its own (Rust, tokio), which, after handing the result to
the caller's event loop, drops its references to that loop and to the call's context, and needs the GIL to do
it. A script that exits right after its last call can reach interpreter finalization while that thread still
waits for the GIL: the process then dies with SIGABRT (`Fatal Python error: PyGILState_Release`) or SIGSEGV
(a core showed the thread freeing the call's `contextvars.Context` while finalization collected garbage;
temporalio/sdk-python#300). A script that submitted its job, printed its id and closed its client died so in 7
of 957 runs without this grace and 0 of 957 with it (`python -m benchmarks client-exit`, 3 at once).

So at exit, after the closers registered here (the blocking clients' loops), a process that opened a Temporal
client sleeps `GRACE_SECONDS` with the GIL released, once. The CLI leaves by `os._exit` and skips all of this
(iris.cli.error_lines.exit_now); this is for scripts and daemons that end normally. No heavy import: a
team-mode client, which loads no Temporal SDK, imports this too.
"""

from __future__ import annotations

import atexit
import contextlib
import time
from collections.abc import Callable

GRACE_SECONDS = 0.05  # the dropping thread needs microseconds once it has the GIL; this covers a busy machine

_sleep = time.sleep  # the module's own name for it: a test replaces it here without touching time.sleep for others
_closers: list[Callable[[], None]] = []
_opened = False


def client_opened() -> None:
    """Note that this process opened a Temporal client: its exit waits the grace."""
    global _opened
    _opened = True


def on_exit(closer: Callable[[], None]) -> None:
    """Run `closer` at exit before the grace (the last registered first, as atexit does)."""
    _closers.append(closer)


def _leave() -> None:
    """Close what is open, then (if a Temporal client was opened) let the SDK's threads finish."""
    while _closers:
        with contextlib.suppress(Exception):
            _closers.pop()()
    if _opened:
        _sleep(GRACE_SECONDS)


atexit.register(_leave)
