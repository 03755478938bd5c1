"""Deployment tests: a bare Temporal dev server with Iris daemons started as a team would start them.

`iris cluster up` is not used here: each test starts `iris controller serve` and `iris worker serve`
processes itself (several controllers, health ports, another store), as on separate machines.
Every process a test starts is stopped (SIGKILL of its group) at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from iris.local.cluster import ClusterInfo, LocalCluster, daemon_environment, free_port


@dataclass
class Daemons:
    """Iris daemons started by one test against one Temporal; all killed at the end."""

    home: Path
    address: str
    store_url: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    """Set for every daemon started after it changes (e.g. the codec key)."""

    def env(self, **extra: str) -> dict[str, str]:
        source_root = str(Path(__file__).resolve().parents[2])
        return {**daemon_environment(os.environ), "PYTHONPATH": source_root, "PYTHONUNBUFFERED": "1",
                "IRIS_HOME": str(self.home), **self.extra_env, **extra}

    def start(self, name: str, args: Sequence[str], **env: str) -> subprocess.Popen[bytes]:
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process at teardown
        proc = subprocess.Popen(
            [sys.executable, "-m", "iris", *args, "--temporal", self.address, "--store", self.store_url],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=self.env(**env),
        )
        log.close()
        self.procs[name] = proc
        return proc

    def start_plain(self, name: str, argv: Sequence[str], **env: str) -> subprocess.Popen[bytes]:
        """Start any command (not an Iris daemon with --temporal/--store) under the same cleanup."""
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - closed right after the fork
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=self.env(**env))
        log.close()
        self.procs[name] = proc
        return proc

    def controller(self, name: str, health_port: int | None = None) -> subprocess.Popen[bytes]:
        args = ["controller", "serve"] + (["--health-port", str(health_port)] if health_port else [])
        return self.start(name, args)

    def worker(self, worker_id: str, health_port: int | None = None, cpu: str = "2") -> subprocess.Popen[bytes]:
        args = ["worker", "serve", "--worker-id", worker_id, "--cpu", cpu, "--memory", "2g", "--task-user", ""]
        return self.start(worker_id, args + (["--health-port", str(health_port)] if health_port else []))

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[name].pid, sig)
        if sig == signal.SIGKILL:
            self.procs[name].wait(30)

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill(name)


def get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; a refused connection is (0, reason)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def health(port: int) -> tuple[int, dict[str, object]]:
    status, body = get(f"http://127.0.0.1:{port}/health")
    try:
        return status, json.loads(body)
    except ValueError:
        return status, {}


@dataclass(frozen=True)
class S3:
    """A real S3-compatible server (moto in server mode) on loopback, with one bucket."""

    endpoint: str
    bucket: str

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3() -> Iterator[S3]:
    """moto's S3 server on 127.0.0.1; AWS_* point this process (and the daemons it starts) at it."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    try:
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}").create_bucket(Bucket="iris-test")
        yield S3(f"http://127.0.0.1:{port}", "iris-test")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@dataclass
class Deployment:
    local: LocalCluster
    info: ClusterInfo
    daemons: Daemons


@contextlib.contextmanager
def deployed(
    tmp_path_factory: pytest.TempPathFactory, dynamic_config: Mapping[str, str] | None = None
) -> Iterator[Deployment]:
    """A bare Temporal dev server (no controller, no workers; `dynamic_config` its settings) and a starter for
    Iris daemons, all stopped at the end."""
    home = tmp_path_factory.mktemp("iris-deploy")
    local = LocalCluster(home)
    info = local.up(components=("temporal",), dynamic_config=dynamic_config)
    daemons = Daemons(home, info.address, info.store_url)
    try:
        yield Deployment(local, info, daemons)
    finally:
        daemons.stop_all()
        local.down()


@pytest.fixture
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """A bare Temporal dev server (no controller, no workers) and a starter for Iris daemons."""
    with deployed(tmp_path_factory) as d:
        yield d


__all__ = ["S3", "Daemons", "Deployment", "deployed", "free_port", "get", "health"]
