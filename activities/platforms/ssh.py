"""Remote commands over SSH, for the platforms whose hosts Iris reaches by SSH (manual hosts, GCP TPU VMs).

A small `Transport` protocol (`run`, `run_streaming`) with one asyncssh implementation.
Host keys: a `known_hosts` file given in config is trusted as is (an unknown host is
refused); without one, keys are accepted on first contact and recorded in
`$IRIS_HOME/known_hosts` (OpenSSH's `StrictHostKeyChecking=accept-new`), and a key
that later differs from the recorded one is refused. Every failure is an `SshError`
whose message is one line naming the host.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

import asyncssh

from activities.home import iris_home

DEFAULT_CONNECT_TIMEOUT = 15.0
DEFAULT_COMMAND_TIMEOUT = 120.0


class SshError(Exception):
    """A host could not be reached, refused us, or a command timed out; the message is one line."""


class SshRefusedError(SshError):
    """The host answered and refused us for good (a key it does not accept, a host key we do not trust):
    trying again without changing the config cannot succeed."""


class HostKeyRefusedError(SshRefusedError):
    """The host's key is not the recorded one (or the host is not in the configured known_hosts)."""


@dataclass(frozen=True)
class CommandResult:
    """What a remote command did: its exit status and its output."""

    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def last_line(self) -> str:
        """The last non-empty line of stderr (else stdout): the usual one-line reason a command failed."""
        for text in (self.stderr, self.stdout):
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1].strip()
        return f"exit status {self.exit_status}"


class Transport(Protocol):
    """Runs shell commands on one host."""

    async def run(self, command: str, *, timeout: float | None = None) -> CommandResult:
        """Run `command` to completion (a non-zero exit is a result, not an error)."""
        ...

    def run_streaming(self, command: str) -> AsyncIterator[str]:
        """Run `command`, yielding its output lines (stdout and stderr merged) as they come."""
        ...


_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?$")  # a DNS name or an IPv4 address


def parse_address(address: str, default_port: int = 22) -> tuple[str, int]:
    """Any host SSH accepts -> (host, port): a name, an IPv4 address, an IPv6 address (in brackets when a
    port follows), each with an optional `:port`. Nothing is resolved here: a name stays a name.

    ValueError (one line) for anything else, e.g. `user@host` (the user is its own setting) or a bad port.
    """
    if "@" in address:
        raise ValueError(f"expected 'host' or 'host:port', got {address!r} (the user is set apart, as `user`)")
    if address.startswith("["):
        inside, closed, rest = address[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"expected '[IPv6]' or '[IPv6]:port', got {address!r}")
        host, port_text = inside, rest[1:] if rest else None
        _check_ipv6(host, address)
    elif address.count(":") > 1:  # a bare IPv6 address: it can take no port
        host, port_text = address, None
        _check_ipv6(host, address)
    else:
        host, _, port_text_or_empty = address.partition(":")
        port_text = port_text_or_empty if ":" in address else None
        if not _HOST_NAME.match(host):
            raise ValueError(f"expected 'host' or 'host:port', got {address!r}")
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"port must be 1..65535 in {address!r}")
    return host, int(port_text)


def _check_ipv6(host: str, address: str) -> None:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise ValueError(f"{host!r} in {address!r} is not an IPv6 address (a port after one needs brackets: "
                         f"'[addr]:port')") from None


@dataclass(frozen=True)
class SshTarget:
    """How to reach one host: address, user, key, and which host keys to trust."""

    host: str
    port: int = 22
    user: str = "root"
    identity_file: Path | None = None  # None: the agent/default keys asyncssh finds
    known_hosts: Path | None = None  # None: accept-new into $IRIS_HOME/known_hosts
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    host_key_alias: str | None = None  # the name its key is recorded under, when addresses get reused (cloud VMs)

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("ssh: host must not be empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"ssh: port must be 1..65535, got {self.port}")

    @property
    def label(self) -> str:
        """`user@host:port`, as error messages name the host."""
        return f"{self.user}@{self.host}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """The host's name in a known_hosts file (OpenSSH writes `[host]:port` for a port other than 22)."""
        name = self.host_key_alias or self.host
        return name if self.port == 22 else f"[{name}]:{self.port}"


class _HostKeyPolicy(asyncssh.SSHClient):
    """Decides on a host key not already trusted: accept and remember it on first contact only."""

    def __init__(self, accept_new: bool) -> None:
        self.accept_new = accept_new
        self.new_key: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        if self.accept_new:
            self.new_key = key
            return True
        return False


def _record_host_key(path: Path, name: str, key: asyncssh.SSHKey) -> None:
    """Append `name key` to a known_hosts file, under a file lock so concurrent first contacts don't interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    algorithm, blob = key.export_public_key("openssh").decode().split()[:2]
    line = f"{name} {algorithm} {blob}\n"
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if line not in f.read().splitlines(keepends=True):
            f.write(line)


class SshTransport:
    """`Transport` over asyncssh. Each call connects and disconnects, unless used as `async with` (one connection)."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self._conn: asyncssh.SSHClientConnection | None = None

    @property
    def known_hosts_path(self) -> Path:
        return self.target.known_hosts or iris_home() / "known_hosts"

    async def __aenter__(self) -> SshTransport:
        self._conn = await self._connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()

    async def _connect(self) -> asyncssh.SSHClientConnection:
        t = self.target
        path = self.known_hosts_path
        try:
            text = path.read_text() if path.exists() else ""
        except OSError as e:
            raise SshError(f"ssh {t.label}: cannot read known_hosts {path}: {e.strerror}") from None
        known = asyncssh.import_known_hosts(text)
        port = t.port if t.port != 22 else None
        name = t.host_key_alias or t.host
        # by name only (OpenSSH's default, CheckHostIP=no): `addr` must be an IP address, and a host name is not one
        recorded = bool(asyncssh.match_known_hosts(known, name, "", port)[0])
        policy = _HostKeyPolicy(accept_new=t.known_hosts is None and not recorded)
        keys = [str(t.identity_file.expanduser())] if t.identity_file is not None else ()
        try:
            conn, _ = await asyncssh.create_connection(
                lambda: policy, t.host, t.port, username=t.user, known_hosts=known, client_keys=keys,
                connect_timeout=t.connect_timeout, host_key_alias=t.host_key_alias,
                # nothing from ~/.ssh/config; an ssh-agent only when no key file is named
                config=None, agent_path=None if t.identity_file is not None else (),
            )
        except asyncssh.HostKeyNotVerifiable:
            if recorded:
                msg = f"host key of {t.known_hosts_name} changed: it differs from the key recorded in {path}"
                if t.known_hosts is None:
                    msg += " (if the host was rebuilt, delete its line there)"
            else:
                msg = f"host key of {t.known_hosts_name} is not in known_hosts {path}"
            raise HostKeyRefusedError(f"ssh {t.label}: {msg}") from None
        except asyncssh.PermissionDenied:
            raise SshRefusedError(f"ssh {t.label}: permission denied (key {t.identity_file or 'default'})") from None
        except asyncssh.Error as e:
            raise SshError(f"ssh {t.label}: {e.reason}") from None
        except TimeoutError:
            raise SshError(f"ssh {t.label}: no answer within {t.connect_timeout:g} s") from None
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)  # not asyncio's "Connect call failed (...)"
            raise SshError(f"ssh {t.label}: {reason}") from None
        except ValueError as e:  # e.g. an unreadable identity file
            raise SshError(f"ssh {t.label}: {e}") from None
        if policy.new_key is not None:
            await asyncio.to_thread(_record_host_key, path, t.known_hosts_name, policy.new_key)
        return conn

    async def run(self, command: str, *, timeout: float | None = DEFAULT_COMMAND_TIMEOUT) -> CommandResult:
        """Run `command` to completion; a timeout or a lost connection is an SshError."""
        conn = self._conn or await self._connect()
        try:
            done = await conn.run(command, check=False, timeout=timeout)
        except asyncssh.TimeoutError:
            raise SshError(f"ssh {self.target.label}: command did not finish within {timeout:g} s") from None
        except (asyncssh.Error, OSError) as e:
            raise SshError(f"ssh {self.target.label}: {getattr(e, 'reason', None) or e}") from None
        finally:
            if self._conn is None:
                conn.close()
        status = done.exit_status if done.exit_status is not None else -1
        return CommandResult(status, _text(done.stdout), _text(done.stderr))

    async def run_streaming(self, command: str) -> AsyncIterator[str]:
        """Run `command`, yielding output lines as they arrive; ends when the command does."""
        conn = self._conn or await self._connect()
        try:
            async with conn.create_process(command, stderr=asyncssh.STDOUT) as process:
                # readline, not `async for`: with stderr merged, the iterator can yield a spurious "" at EOF
                while line := await process.stdout.readline():
                    yield line.rstrip("\n")
        except (asyncssh.Error, OSError) as e:
            raise SshError(f"ssh {self.target.label}: {getattr(e, 'reason', None) or e}") from None
        finally:
            if self._conn is None:
                conn.close()


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
