"""A warm interpreter that starts shipped callables by forking: the process runtime's fast path.

Why: a fresh ``python -m worker_agent.task_runner`` pays the interpreter's startup on every
attempt (``site`` and its ``.pth`` files, then the runner's imports: 50-70 ms of CPU on this
project's machines), and inside the job's cgroup that CPU is rationed: under a 0.1-core limit the
function's first line came ~650 ms after the process started. This process pays that once: it
imports the task runner and cloudpickle, then for each callable forks a child that becomes what
``python -m worker_agent.task_runner ARGS`` would have been, and reaches the function in a
millisecond or two of the task's own CPU.

What the child becomes, in order (before any of the task's code runs): the leader of a new
session (so the agent kills its whole group), a member of the task's cgroups, in the task's
working directory, the task user (no supplementary groups), with the log on stdout and stderr and
``/dev/null`` on stdin, nothing else open, the task's environment in ``os.environ``, and the
``sys.path`` a fresh interpreter would build from it (working directory, the task's
``PYTHONPATH``, then the interpreter's own and site directories, with the task user's own site
directory). It then runs the runner module as ``__main__`` and ends as the runner ends any task
(``task_runner.end_process``: threads joined, atexit handlers run, no interpreter teardown).

What stays shared with this process, and why that is acceptable: the start-up choices Python
makes from the environment (``PYTHON*`` variables, locale, ``TZ``) are this process's, so the
agent sends only tasks whose environment agrees on them (others start fresh); the string-hash
secret and the address-space layout are this process's (``random`` reseeds itself after a fork).

Protocol, on the stream socket given as the one argument (a descriptor number): frames of a
4-byte big-endian length and a JSON object. Agent to here: ``{"id", "args", "env", "cwd", "uid",
"gid", "cgroups"}`` with the task's log descriptor attached to the frame's first byte. Here to
the agent: ``{"ready": pid}`` once, then ``{"id", "pid", "joined"}`` when the child runs its code
(``joined``: whether it is in all its cgroups) or ``{"id", "error"}`` when it could not get that
far, and ``{"exited": pid, "code": exit code}`` (negative: the signal) when a child ends. End of
stream from the agent ends this process; the children live on in their sessions and the agent's
ledger knows them.

Only the standard library and the runner's own modules may be imported here: every child
inherits them.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import runpy
import select
import signal
import site
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any, Final

import worker_agent.task_runner  # noqa: F401 - imported once here rather than in every task

# What the runner imports only when it needs it (an async function, a failure, a result that is
# not plain data, a long key, an escaped store URL, threads to join), imported here too: a child
# may run as a user who cannot read this interpreter's library.
for _lazy in ("asyncio", "traceback", "cloudpickle", "hashlib", "urllib.parse", "threading"):
    __import__(_lazy)

RUNNER_MODULE: Final = "worker_agent.task_runner"
# What a child tells this process once it is the task (anything else is why it is not).
_JOINED: Final = b"\0running, in its cgroups"
_RUNNING: Final = b"\0running, not in all its cgroups"
_PR_SET_DUMPABLE: Final = 4
_libc = ctypes.CDLL(None, use_errno=True)
HEADER: Final = struct.Struct(">I")
_MAX_FRAME: Final = 64 << 20


@dataclass(frozen=True)
class Launch:
    """One task to start, as the agent asked for it."""

    id: int
    args: list[str]
    env: dict[str, str]
    cwd: str
    uid: int | None
    gid: int | None
    cgroups: list[str]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Launch:
        env = {str(k): str(v) for k, v in body["env"].items()}
        return cls(
            id=int(body["id"]), args=[str(a) for a in body["args"]], env=env, cwd=str(body["cwd"]),
            uid=body.get("uid"), gid=body.get("gid"), cgroups=[str(p) for p in body["cgroups"]],
        )  # fmt: skip


def send_frame(sock: socket.socket, body: dict[str, Any], fds: list[int] | None = None) -> None:
    """Write one frame (blocking), with ``fds`` attached to its first byte."""
    data = json.dumps(body).encode()
    frame = HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [frame], fds) if fds else sock.send(frame)
    if sent < len(frame):
        sock.sendall(frame[sent:])


class FrameReader:
    """Reads whole frames from a blocking stream socket, with the descriptors sent along."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def pending(self) -> bool:
        """Whether bytes of a next frame are already buffered (the socket may not wake a select)."""
        return bool(self._buffer)

    def read(self) -> tuple[dict[str, Any], list[int]] | None:
        """The next frame and its descriptors; None at end of stream."""
        fds: list[int] = []
        while True:
            if len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                if size > _MAX_FRAME:
                    raise ValueError(f"frame of {size} bytes")
                if len(self._buffer) >= HEADER.size + size:
                    data = self._buffer[HEADER.size : HEADER.size + size]
                    self._buffer = self._buffer[HEADER.size + size :]
                    return json.loads(data), fds
            chunk, more, _, _ = socket.recv_fds(self._sock, 1 << 16, 4)
            fds += more
            if not chunk:
                for fd in fds:
                    os.close(fd)
                return None
            self._buffer += chunk


# sys.path holds strings made the way CPython's start-up makes them (os.path.abspath, no symlinks
# resolved), so these helpers use os.path rather than pathlib.
def _base_path() -> list[str]:
    """This interpreter's ``sys.path`` without what its start-up added from the working directory,
    ``PYTHONPATH`` or the user's site directory: the part every task shares."""
    ours = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}  # noqa: PTH100
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    return [p for p in sys.path[1:] if p not in ours and p != user_site]


def _user_site(env: dict[str, str]) -> str | None:
    """The task user's own site directory, where a fresh interpreter would look for one (POSIX)."""
    if not site.ENABLE_USER_SITE:
        return None
    base = env.get("PYTHONUSERBASE") or os.path.join(env.get("HOME", "/"), ".local")  # noqa: PTH118
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return os.path.join(base, "lib", version, "site-packages")  # noqa: PTH118


def _python_path(launch: Launch, base: list[str]) -> list[str]:
    """The ``sys.path`` ``python -m`` builds for this task: cwd, PYTHONPATH, the shared part, user site."""
    extra = [os.path.abspath(p) for p in launch.env.get("PYTHONPATH", "").split(os.pathsep) if p]  # noqa: PTH100
    path = [launch.cwd, *extra, *base]
    user_site = _user_site(launch.env)
    if user_site is not None and os.path.isdir(user_site):  # noqa: PTH112
        system = set(site.getsitepackages())
        at = next((i for i, p in enumerate(path) if p in system), len(path))
        path.insert(at, user_site)
    return path


def _become(launch: Launch, log_fd: int, base: list[str]) -> bool:
    """Turn this forked child into the task's process (see the module docstring); OSError on failure.

    Whether it joined all its cgroups: joining is best effort, like the exec path's shell, and the
    agent moves a task that did not (a move costs an RCU grace period on cgroup v1: pay it once).
    """
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    joined = True
    for procs in launch.cgroups:
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            joined = False
    try:
        os.chdir(launch.cwd)
    except OSError as exc:
        raise OSError(f"cannot start task: working directory {launch.cwd!r} is unusable ({exc.strerror})") from None
    if launch.uid is not None and launch.gid is not None:
        os.setgroups([])
        os.setresgid(launch.gid, launch.gid, launch.gid)
        os.setresuid(launch.uid, launch.uid, launch.uid)
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # as after an exec: the task user may debug its own task
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.environ.clear()
    os.environ.update(launch.env)
    sys.path[:] = _python_path(launch, base)
    sys.argv[:] = [RUNNER_MODULE, *launch.args]
    return joined


def serve(sock: socket.socket) -> tuple[Launch, int] | None:
    """Fork a child per request until the agent hangs up; returns only in a child, ready to run."""
    base = _base_path()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    reader = FrameReader(sock)
    children: set[int] = set()
    send_frame(sock, {"ready": os.getpid()})
    gc.freeze()  # what is here now stays shared with the children: a collection would copy it
    while True:
        listening = sock.fileno()
        readable = [listening] if reader.pending() else select.select([listening, wake_r], [], [])[0]
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            _reap(sock, children)
        if listening not in readable:
            continue
        got = reader.read()
        if got is None:
            return None
        body, fds = got
        launch = Launch.from_json(body)
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            send_frame(sock, {"id": launch.id, "error": "cannot start task: no log descriptor"})
            continue
        log_fd = fds[0]
        ready_r, ready_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            sock.detach()  # closed below with the rest: the object must not close a reused number later
            try:
                joined = _become(launch, log_fd, base)
                os.closerange(3, ready_w)
                os.closerange(ready_w + 1, 1 << 20)
            except BaseException as exc:  # whatever it was, the child must not run on
                reason = str(exc) if isinstance(exc, OSError) and not exc.errno else f"cannot start task: {exc}"
                os.write(ready_w, reason.encode("utf-8", "replace"))
                os._exit(127)
            os.write(ready_w, _JOINED if joined else _RUNNING)
            os.close(ready_w)
            return launch, log_fd
        os.close(ready_w)
        os.close(log_fd)
        children.add(pid)
        word = _read_all(ready_r)
        if word in (_JOINED, _RUNNING):
            send_frame(sock, {"id": launch.id, "pid": pid, "joined": word == _JOINED})
        else:
            children.discard(pid)
            _, status = os.waitpid(pid, 0)
            reason = word.decode("utf-8", "replace") or f"cannot start task: {_died_unheard(status)}"
            send_frame(sock, {"id": launch.id, "error": reason})


def _died_unheard(status: int) -> str:
    """Why a child ended before it could say anything: the agent reads a signal (SIGKILL, most often its cgroup's
    memory limit) or an exit code, where a bare "cannot start task" left the user nothing to act on."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"its process was killed by {name} before it started"
    return f"its process exited with code {os.waitstatus_to_exitcode(status)} before it started"


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _reap(sock: socket.socket, children: set[int]) -> None:
    """Report every child that has ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            children.discard(pid)
            send_frame(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def main(argv: list[str] | None = None) -> int:
    """Serve the agent on the socket descriptor given; in each child, run the task runner."""
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    try:
        started = serve(sock)
    except (BrokenPipeError, ConnectionResetError):  # the agent hung up while this got ready or replied
        return 0
    if started is None:
        return 0
    sys.modules.pop(RUNNER_MODULE, None)  # run as __main__, and only there, as `python -m` would
    runpy.run_module(RUNNER_MODULE, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
