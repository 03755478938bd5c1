"""Ports and process output, for the local cluster: free and answering ports, and why a process failed.

Starting, finding and stopping the cluster's processes is the local platform's
(activities.platforms.local_process); `pid_alive` is kept here for the callers that hold a pid.
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

from activities.platforms.local_process import LocalProcess

_HOST = "127.0.0.1"


def pid_alive(pid: int, ticks: int | None = None) -> bool:
    """Whether `pid` runs (not a zombie) and, when `ticks` (its start time) is known, is the process we started."""
    return LocalProcess(pid, ticks).alive()


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on the loopback `port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((_HOST, port)) == 0


def reserve_port(port: int = 0) -> int:
    """Bind the loopback `port` (0: a free one below the OS's ephemeral range, see `_pick`), then leave it in
    TIME_WAIT; the port, OSError if taken.

    A server of the local cluster binds its port seconds after `up` chose it (its process has to start
    first). Meanwhile the OS could hand a merely free port to any program that asks for one or connects
    somewhere (servers started side by side did take one). A connection closed by its accepting end leaves
    the port in TIME_WAIT for a minute: the OS gives it to no one else, neither to bind(0) nor to connect(),
    while a server that reuses the address (Go's listeners, asyncio's) binds it at once.
    """
    if port == 0:
        with contextlib.suppress(LookupError):
            return _pick()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((_HOST, port))
        server.listen(1)
        bound: int = server.getsockname()[1]
        with socket.create_connection((_HOST, bound), timeout=5):
            accepted, _ = server.accept()
            accepted.close()  # the accepting end closes first: its side, the port, goes to TIME_WAIT
    return bound


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PICKED_PORTS = range(10_000, 20_000)
"""Where the cluster's servers' ports are picked: below the ports agents hand to tasks (20000-29999 by default,
docs/distributed.md) and below Linux's ephemeral range (32768 and up by default)."""
_PICK_TRIES = 20


def _pick() -> int:
    """A reserved port of PICKED_PORTS under the OS's ephemeral range; LookupError if none was had.

    A server of the cluster that dies is started again on its port, which the OS, once the port is free, gives to
    the next program that connects anywhere or asks for any port: a dev server killed in the suite came back to
    find its port taken, moved, and left every client of the old address stranded. Outside the ephemeral range
    only a program that names the port can take it.
    """
    try:
        high = min(PICKED_PORTS.stop, int(_EPHEMERAL_RANGE.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        high = 0
    for _ in range(_PICK_TRIES if high > PICKED_PORTS.start + 1_000 else 0):
        with contextlib.suppress(OSError):
            return reserve_port(random.randrange(PICKED_PORTS.start, high))
    raise LookupError("no free port below the ephemeral range")


def port_free(port: int) -> bool:
    """Whether the loopback `port` can be bound now by a server that reuses the address.

    A port its last server left in TIME_WAIT (killed with connections open) is free: the dev
    server binds with SO_REUSEADDR, as Go's listeners do, so a restart keeps its address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
        return True


def log_since(path: Path, offset: int, limit: int | None = 2000) -> str:
    """The end of what `path` gained after `offset` (this start's output, not earlier runs'); all of it
    with `limit` None."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return (text if limit is None else text[-limit:]).strip()


def crash_excerpt(output: str, limit: int = 2000) -> str:
    """What a process's output says of why it failed: a Go panic's message without its goroutine dump
    (the dev server panics after a failed listen, and the dump pushes the reason out of any tail)."""
    cause = output.split("\ngoroutine ", 1)[0] if "\npanic: " in f"\n{output}" else output
    return cause[-limit:].strip()
