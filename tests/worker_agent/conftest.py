"""Fixtures for worker-agent tests: stores in tmp dirs, a runtime that never leaks processes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import worker_agent
from worker_agent.runtimes.base import TaskHandle, TaskSpec
from worker_agent.runtimes.process import ProcessRuntime
from worker_agent.storage import BlobStore, LogStore

REPO_ROOT = Path(worker_agent.__file__).resolve().parents[1]


@pytest.fixture
def blob_store(tmp_path: Path) -> BlobStore:
    """A blob store in a fresh temporary directory."""
    return BlobStore.from_url((tmp_path / "blobs").as_uri())


@pytest.fixture
def log_store(tmp_path: Path) -> LogStore:
    """A log store in a fresh temporary directory."""
    return LogStore.from_url(str(tmp_path / "logs"))


class TrackingRuntime(ProcessRuntime):
    """A ProcessRuntime that remembers every task so the fixture can kill leftovers."""

    def __init__(self) -> None:
        super().__init__(straggler_grace_seconds=0.5)
        self.started: list[TaskHandle] = []

    async def start(self, spec: TaskSpec) -> TaskHandle:
        """Start the task and remember it."""
        handle = await super().start(spec)
        self.started.append(handle)
        return handle


@pytest.fixture
async def runtime(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TrackingRuntime]:
    """A process runtime whose tasks (and their process groups) are killed after the test."""
    # Task subprocesses must import this repository even where it is not pip-installed.
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", f"{REPO_ROOT}{os.pathsep}{pythonpath}" if pythonpath else str(REPO_ROOT))
    tracking = TrackingRuntime()
    yield tracking
    for handle in tracking.started:
        await tracking.kill(handle, grace_seconds=0)
    await tracking.close()  # its forkserver, if a callable started one
