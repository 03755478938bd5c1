"""Real container engines for the runtime tests: a private dockerd and containerd, started once per session.

Each engine gets its own directories and socket in a temporary directory and the test image
(this interpreter in a root filesystem, plus a stand-in pause image) loaded from an archive the
suite writes; both are stopped and cleaned up after the session. A missing engine (not
installed, not root) skips the tests that need it, or fails them under CI.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from benchmarks.engines import EngineUnavailable, PrivateContainerd, PrivateDockerd, write_python_image
from tests.support import missing_engine
from worker_agent.runtimes.base import ContainerRuntime
from worker_agent.storage import LogStore

ENGINES = ("docker", "containerd")


@pytest.fixture(scope="session")
def image_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test images (python, pause) as one docker-archive."""
    return write_python_image(tmp_path_factory.mktemp("images") / "images.tar")


@pytest.fixture(scope="session")
def dockerd(image_archive: Path) -> Iterator[PrivateDockerd]:
    """A private dockerd with the test image loaded."""
    engine = PrivateDockerd()
    try:
        engine.start()
        engine.load(image_archive)
    except EngineUnavailable as exc:
        engine.stop()
        missing_engine(f"dockerd: {exc}")
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def containerd(image_archive: Path) -> Iterator[PrivateContainerd]:
    """A private containerd (CRI on) with the test and pause images imported."""
    engine = PrivateContainerd()
    try:
        engine.start()
        engine.import_image(image_archive)
    except EngineUnavailable as exc:
        engine.stop()
        missing_engine(f"containerd: {exc}")
    try:
        yield engine
    finally:
        engine.stop()


def make_engine_runtime(name: str, request: pytest.FixtureRequest, worker_id: str) -> ContainerRuntime:
    """A runtime of kind ``name`` connected to the session's private engine."""
    if name == "docker":
        from worker_agent.runtimes.docker import DockerRuntime

        engine = request.getfixturevalue("dockerd")
        return DockerRuntime(worker_id=worker_id, docker_host=engine.url)
    from worker_agent.runtimes.containerd import ContainerdRuntime

    engine = request.getfixturevalue("containerd")
    logs = engine.base / "cri-logs" / worker_id  # removed with the engine
    return ContainerdRuntime(worker_id=worker_id, socket=str(engine.socket), log_dir=logs)


@pytest.fixture(params=ENGINES)
async def engine_runtime(request: pytest.FixtureRequest) -> AsyncIterator[ContainerRuntime]:
    """A container runtime on a real engine (one test per engine); its tasks are removed after."""
    worker_id = f"test-{os.getpid()}"
    runtime = make_engine_runtime(request.param, request, worker_id)
    try:
        yield runtime
    finally:
        await runtime.close()
        sweeper = make_engine_runtime(request.param, request, worker_id)
        with contextlib.suppress(Exception):
            await sweeper.recover()
        await sweeper.close()


@pytest.fixture
def log_store(tmp_path: Path) -> LogStore:
    """A log store in a fresh temporary directory."""
    return LogStore.from_url(str(tmp_path / "logs"))
