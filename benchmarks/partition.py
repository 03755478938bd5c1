"""A network partition between one agent and Temporal, on one machine: the agent reaches the dev server only
through a TCP proxy that can stop carrying its traffic.

While the link is cut nothing crosses it either way and nothing is closed: the proxy stops reading, so the
bytes wait in the kernel's buffers and the senders stall, and a new connection is accepted but carried
nowhere — what a switch dropping the agent's packets does to TCP, whose retransmissions deliver everything
once the link is back. The agent itself runs on, free to act (unlike a frozen one): only its requests go
unanswered, so the leases it cannot renew must expire by themselves (docs/reliability.md, "Leases").

The agent is started apart from the cluster's record (the supervisor does not restart it); whoever starts it
stops it (`PartitionableAgent.stop`).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from pathlib import Path

from iris.config.cluster_file import LocalWorkerSpec
from iris.local.commands import child_env, worker_command

__all__ = ["LinkProxy", "PartitionableAgent"]

_CHUNK = 65536


class LinkProxy:
    """Carries TCP connections from 127.0.0.1:`port` to `upstream` until `cut()`, again after `heal()`."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"link-proxy-{self.port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def cut_now(self) -> bool:
        return not self._flowing.is_set()

    def cut(self) -> None:
        """Stop carrying anything, either way, on every connection (new ones included)."""
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with self._lock:
            for s in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    s.close()

    def _keep(self, s: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(s)
        return s

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inside, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._link, args=(self._keep(inside),), daemon=True).start()

    def _link(self, inside: socket.socket) -> None:
        self._flowing.wait()  # a connection made while cut goes nowhere until the link is back
        try:
            outside = self._keep(socket.create_connection(self.upstream, timeout=10))
        except OSError:
            inside.close()
            return
        outside.settimeout(None)
        threading.Thread(target=self._pump, args=(outside, inside), daemon=True).start()
        self._pump(inside, outside)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                self._flowing.wait()
                data = source.recv(_CHUNK)
                if not data or self._closed.is_set():
                    break
                self._flowing.wait()  # cut between the read and the write: hold the bytes, as the wire would
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


class PartitionableAgent:
    """An agent (`iris worker serve`) of a running local cluster whose every Temporal connection passes a
    `LinkProxy`; its own process, outside the cluster's record."""

    def __init__(self, home: Path, spec: LocalWorkerSpec, address: str, store_url: str) -> None:
        self.spec = spec
        self.link = LinkProxy(address)
        log = (home / "logs" / f"{spec.worker_id}.log").open("ab")
        self.process = subprocess.Popen(
            worker_command(spec, address=self.link.address, store_url=store_url), env=child_env(home),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self, timeout: float = 20.0) -> None:
        """Heal the link (so the agent can say goodbye), stop the agent, close the proxy."""
        self.link.heal()
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.link.close()
