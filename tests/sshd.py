"""A real OpenSSH server on loopback for the SSH-reached platforms' tests.

`start_sshd` generates a host key and a client key, writes an sshd_config in a temporary
directory (127.0.0.1 only, one or more ports, key auth only) and runs `/usr/sbin/sshd -D`.
Each port stands for one "host". Sessions get `HOME` (sshd's SetEnv) and `IRIS_HOME`
(the client key's authorized_keys entry) in the test's directory, so remote state (claims,
agent pid and log files) lands there instead of the user's home, and `TMPDIR` in a directory
of their own that `close` removes (agents put their tasks' areas in the temp dir when tasks run
as another user, so it lives outside the test's private directory, traversable by that user).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from iris.local.processes import reserve_port
from tests.support import missing_engine

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    """A loopback port no other program gets until sshd binds it (see iris.local.processes.reserve_port)."""
    return reserve_port()


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@dataclass
class Sshd:
    """A running sshd and what a client needs to reach it."""

    directory: Path
    ports: list[int]
    client_key: Path
    remote_home: Path  # IRIS_HOME of every session
    remote_tmp: Path | None = None  # TMPDIR of every session; removed by `close`
    user: str = field(default_factory=getpass.getuser)
    env: dict[str, str] = field(default_factory=dict)  # sshd's SetEnv: every session gets these
    process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    @property
    def host_key(self) -> Path:
        return self.directory / "host_ed25519"

    def start(self) -> None:
        """(Re)start the server on the same ports with the current host key; wait until it accepts."""
        config = self.directory / "sshd_config"
        config.write_text(
            "".join(f"Port {p}\n" for p in self.ports)
            + f"ListenAddress 127.0.0.1\nHostKey {self.host_key}\nPidFile {self.directory / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.directory / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nStrictModes no\nUsePAM no\nPermitUserEnvironment yes\n"
            "LogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
            + ("SetEnv " + " ".join(f'"{k}={v}"' for k, v in self.env.items()) + "\n" if self.env else "")
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        with open(self.directory / "sshd.log", "ab") as log:
            self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=log)
        deadline = time.monotonic() + 30
        for port in self.ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        log_text = (self.directory / "sshd.log").read_text()
                        raise RuntimeError(f"sshd did not start: {log_text}") from None
                    time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def close(self) -> None:
        """Stop for good: also remove the sessions' temp dir."""
        self.stop()
        if self.remote_tmp is not None:
            shutil.rmtree(self.remote_tmp, ignore_errors=True)

    def new_host_key(self) -> None:
        """Replace the host key and restart: the same host:port now presents a different key."""
        self.stop()
        self.host_key.unlink()
        self.host_key.with_suffix(".pub").unlink()
        keygen(self.host_key)
        self.start()


def start_sshd(directory: Path, hosts: int = 1, env: dict[str, str] | None = None) -> Sshd:
    """Generate keys, configure and start an sshd with `hosts` loopback ports; skip when sshd is missing.

    `env` is set in every session (e.g. PATH with this venv's `iris`, $GCE_METADATA_HOST).
    """
    if not SSHD.exists() or shutil.which("ssh-keygen") is None:
        missing_engine("openssh-server (/usr/sbin/sshd) and ssh-keygen are not installed")
    if os.geteuid() != 0:
        missing_engine("sshd tests run as root (sshd needs it to switch to the login user)")
    directory.mkdir(parents=True, exist_ok=True)
    remote_home = directory / "remote-home"
    remote_home.mkdir()
    # HOME too: the login shell then reads no ~/.bashrc of the real user (which may put another `iris` first)
    remote_tmp = Path(tempfile.mkdtemp(prefix="iris-test-sshd-"))
    remote_tmp.chmod(0o711)  # the shared temp dir's stand-in: tasks running as `nobody` traverse it
    server = Sshd(directory, [free_port() for _ in range(hosts)], directory / "client_ed25519", remote_home,
                  remote_tmp, env={"HOME": str(remote_home), "TMPDIR": str(remote_tmp), **_pythonpath(), **(env or {})})
    keygen(server.host_key)
    keygen(server.client_key)
    public = server.client_key.with_suffix(".pub").read_text().strip()
    (directory / "authorized_keys").write_text(f'environment="IRIS_HOME={remote_home}" {public}\n')
    server.start()
    return server


def _pythonpath() -> dict[str, str]:
    """The remote side is this machine: its agents import the code under test, as this process does."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path} if path else {}


def worker_command() -> str:
    """`iris worker serve` from this interpreter (the remote side is this machine), its tasks as its own user:
    this interpreter may live where `nobody` cannot read it (the agent would refuse to start)."""
    return f"{sys.executable} -m iris worker serve --task-user ''"
