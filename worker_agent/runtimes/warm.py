"""The agent's end of the forkserver (``forkserver.py``): start it, launch callables through it, learn their exits.

The process runtime keeps one ``ForkServer`` and sends it the shipped callables whose environment
agrees with the server's on what Python reads at start-up (``startup_environment``); everything
else, and every callable while no server is ready, starts as a fresh process as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO, Final

import structlog

from worker_agent.process_table import GONE, status
from worker_agent.runtimes.base import TaskStartError
from worker_agent.runtimes.forkserver import HEADER, RUNNER_MODULE

__all__ = ["ForkServer", "ForkServerError", "WarmProcess", "runner_args", "startup_environment"]

logger = structlog.get_logger(__name__)

SERVER_MODULE: Final = "worker_agent.runtimes.forkserver"
_READY_SECONDS: Final = 60.0
_STARTUP_NAMES: Final = frozenset({"LANG", "LC_ALL", "LC_CTYPE", "TZ"})
_LOST_POLL_SECONDS: Final = 0.2
EXIT_LOST: Final = 1
"""The exit code reported for a task whose server died before saying how it ended."""


class ForkServerError(Exception):
    """The server could not be started or stopped answering."""


def startup_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a Python process reads once at start-up (``PYTHON*`` but the path; locale; TZ)."""
    return {
        name: value
        for name, value in env.items()
        if (name.startswith("PYTHON") and name != "PYTHONPATH") or name in _STARTUP_NAMES
    }


def runner_args(argv: Sequence[str], python: str) -> list[str] | None:
    """The task runner's arguments if ``argv`` is ``python -m worker_agent.task_runner ...``, else None."""
    if len(argv) > 3 and argv[0] == python and tuple(argv[1:3]) == ("-m", RUNNER_MODULE):
        return list(argv[3:])
    return None


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process."""
    found = status(pid)
    return found is not None and found not in GONE


class WarmProcess:
    """A task's main process forked by the server: its pid, and its exit code once the server reports it."""

    def __init__(self, pid: int, joined: bool = False) -> None:
        self.pid = pid
        self.joined = joined
        """Whether the process joined all the cgroups it was given before the task's code ran."""
        self.returncode: int | None = None
        self._ended = asyncio.Event()

    async def wait(self) -> int:
        """The exit code (negative: killed by that signal), once the process has ended."""
        await self._ended.wait()
        assert self.returncode is not None
        return self.returncode

    def ended(self, code: int) -> None:
        """Record the exit (the first report wins)."""
        if self.returncode is None:
            self.returncode = code
            self._ended.set()


class ForkServer:
    """One running forkserver; ``start`` it, ``launch`` callables, ``close`` it."""

    def __init__(self, process: asyncio.subprocess.Process, sock: socket.socket, env: Mapping[str, str]) -> None:
        self._process = process
        self._sock = sock
        self._startup = startup_environment(env)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[WarmProcess]] = {}
        self._running: dict[int, WarmProcess] = {}
        self._send_lock = asyncio.Lock()
        self._buffer = b""
        self._alive = True
        self._reader: asyncio.Task[None] | None = None
        self._watchers: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(cls, python: str, env: Mapping[str, str]) -> ForkServer:
        """Start a server under ``python`` with ``env`` (a task's default environment); ForkServerError if it fails."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await asyncio.create_subprocess_exec(
                python, "-m", SERVER_MODULE, str(theirs.fileno()),
                pass_fds=[theirs.fileno()], env=dict(env), cwd="/", start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        except OSError as exc:
            ours.close()
            raise ForkServerError(f"cannot start {python} -m {SERVER_MODULE}: {exc}") from exc
        finally:
            theirs.close()
        ours.setblocking(False)
        server = cls(process, ours, env)
        try:
            async with asyncio.timeout(_READY_SECONDS):
                ready = await server._frame()
        except (TimeoutError, OSError, ValueError) as exc:
            ready = None
            logger.warning("forkserver_not_ready", error=str(exc) or type(exc).__name__)
        if ready is None or "ready" not in ready:
            await server.close()
            raise ForkServerError("the forkserver did not get ready (see the agent's stderr)")
        server._reader = asyncio.create_task(server._read())
        logger.info("forkserver_ready", pid=process.pid)
        return server

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether the server still answers."""
        return self._alive

    def matches(self, env: Mapping[str, str]) -> bool:
        """Whether a task with ``env`` may start here: the start-up variables agree with the server's."""
        return startup_environment(env) == self._startup

    async def launch(
        self, *, args: Sequence[str], env: Mapping[str, str], cwd: str, log: BinaryIO,
        uid: int | None = None, gid: int | None = None, cgroups: Sequence[str] = (),
    ) -> WarmProcess:  # fmt: skip
        """Fork a task running the runner with ``args``; TaskStartError with the reason if it cannot start.

        ForkServerError when the server never got the request (so nothing was started).
        """
        if not self._alive:
            raise ForkServerError("the forkserver is gone")
        request_id = next(self._ids)
        reply: asyncio.Future[WarmProcess] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = reply
        body = {"id": request_id, "args": list(args), "env": dict(env), "cwd": cwd, "uid": uid, "gid": gid,
                "cgroups": list(cgroups)}  # fmt: skip
        try:
            await self._send(body, log.fileno())
            return await reply
        finally:
            self._pending.pop(request_id, None)

    async def close(self) -> None:
        """Hang up (the server exits; tasks it started run on) and reap it."""
        self._alive = False
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._sock.close()
        try:
            async with asyncio.timeout(5):
                await self._process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            await self._process.wait()
        self._fail_all("the forkserver was closed")

    # -- wire ----------------------------------------------------------------------------------

    async def _send(self, body: dict[str, Any], fd: int) -> None:
        data = json.dumps(body).encode()
        frame = HEADER.pack(len(data)) + data
        loop = asyncio.get_running_loop()
        async with self._send_lock:
            while True:
                try:
                    sent = socket.send_fds(self._sock, [frame], [fd])
                    break
                except BlockingIOError:
                    writable: asyncio.Future[None] = loop.create_future()
                    loop.add_writer(self._sock, writable.set_result, None)
                    try:
                        await writable
                    finally:
                        loop.remove_writer(self._sock)
                except OSError as exc:
                    raise ForkServerError(f"the forkserver stopped listening: {exc}") from exc
            if sent < len(frame):
                await loop.sock_sendall(self._sock, frame[sent:])

    async def _frame(self) -> dict[str, Any] | None:
        """The next frame from the server; None at end of stream."""
        loop = asyncio.get_running_loop()
        while True:
            if len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= HEADER.size + size:
                    data = self._buffer[HEADER.size : HEADER.size + size]
                    self._buffer = self._buffer[HEADER.size + size :]
                    body: dict[str, Any] = json.loads(data)
                    return body
            chunk = await loop.sock_recv(self._sock, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk

    async def _read(self) -> None:
        """Dispatch the server's frames until it is gone."""
        try:
            while (body := await self._frame()) is not None:
                if "exited" in body:
                    process = self._running.pop(int(body["exited"]), None)
                    if process is not None:
                        process.ended(int(body["code"]))
                    continue
                reply = self._pending.get(int(body.get("id", -1)))
                if reply is None or reply.done():
                    continue
                if "pid" in body:
                    process = WarmProcess(int(body["pid"]), joined=bool(body.get("joined")))
                    self._running[process.pid] = process
                    reply.set_result(process)
                else:
                    reply.set_exception(TaskStartError(str(body.get("error", "cannot start task"))))
        except (OSError, ValueError) as exc:
            logger.warning("forkserver_unreadable", error=str(exc))
        if self._alive:
            logger.warning("forkserver_lost", pid=self._process.pid, tasks=len(self._running))
        self._alive = False
        self._fail_all("the forkserver that starts callables died")

    def _fail_all(self, why: str) -> None:
        """Fail what waits for a reply; watch the orphaned tasks until they are gone."""
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(TaskStartError(f"cannot start task: {why}"))
        orphans, self._running = list(self._running.values()), {}
        for process in orphans:
            watcher = asyncio.get_running_loop().create_task(_watch_orphan(process))
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)


async def _watch_orphan(process: WarmProcess) -> None:
    """A task whose server died: its exit code is lost, so it ends with EXIT_LOST once it is gone."""
    while _running(process.pid):  # noqa: ASYNC110 - nothing signals the end of another's child
        await asyncio.sleep(_LOST_POLL_SECONDS)
    process.ended(EXIT_LOST)
