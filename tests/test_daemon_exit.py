"""A daemon told to stop leaves even while a thread it started is stuck (iris.cli.daemon_commands.run_daemon)."""

from __future__ import annotations

import asyncio
import threading

from iris.cli.daemon_commands import run_daemon


def test_a_stopping_daemon_does_not_wait_for_a_stuck_thread() -> None:
    release = threading.Event()
    started = threading.Event()
    served: list[str] = []
    threads: list[threading.Thread] = []

    def stuck() -> None:
        threads.append(threading.current_thread())
        started.set()
        release.wait(60)

    async def serve() -> None:
        asyncio.get_running_loop().run_in_executor(None, stuck)  # e.g. a slice's terminate waiting on its hosts
        await asyncio.to_thread(started.wait, 30)
        served.append("stopped")

    try:
        run_daemon(serve(), grace=0.2)
        assert served == ["stopped"]
        assert threads[0].is_alive()  # returned while the thread was still stuck: asyncio.run waits for it
    finally:
        release.set()


def test_a_daemon_whose_threads_finish_returns_what_it_served() -> None:
    done: list[int] = []

    async def serve() -> None:
        done.append(await asyncio.to_thread(sum, [1, 2, 3]))

    run_daemon(serve())
    assert done == [6]
