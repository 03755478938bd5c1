"""The controllers' and agents' own logs in the store: shipped in bounded batches, read with `iris logs`."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import IrisClient, ResourceSpec
from iris.controller import daemon_logs
from iris.controller.daemon_logs import DaemonLogShipper
from tests.ops.cli import iris
from tests.support import Cluster, wait_until


@pytest.fixture(params=["directory", "object"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL: a directory, or an object store (fsspec's in-memory one)."""
    if request.param == "directory":
        yield tmp_path.as_uri()
        return
    import fsspec

    yield f"memory://store-{time.monotonic_ns()}"
    fsspec.filesystem("memory").store.clear()


def _stored(store: str, kind: str, daemon_id: str) -> list[str]:
    return daemon_logs.daemon_log_store(store, kind).read_lines(daemon_id, 0)


def test_lines_are_shipped_in_one_write_per_flush(store: str) -> None:
    """Buffered lines reach the store on flush, in order, as one append; the daemon is listed."""
    shipper = DaemonLogShipper(store, "worker", "w-1")
    try:
        for n in range(3):
            shipper.add(json.dumps({"event": f"e{n}"}))
        shipper.flush()
        expected = ['{"event": "e0"}', '{"event": "e1"}', '{"event": "e2"}']  # an object store ships within 0.5 s
        assert expected == wait_until(lambda: _stored(store, "worker", "w-1"), timeout=10, what="lines stored")
        assert (["w-1"], []) == (daemon_logs.daemon_ids(store, "worker"), daemon_logs.daemon_ids(store, "controller"))
    finally:
        shipper.close()


def test_a_full_buffer_drops_the_oldest_lines_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_BUFFERED_LINES (a store that is away) the oldest lines go, and the log says how many."""
    monkeypatch.setattr(daemon_logs, "MAX_BUFFERED_LINES", 4)
    shipper = DaemonLogShipper(tmp_path.as_uri(), "controller", "c")
    try:
        with shipper._flush_lock:  # the store is away while the lines come
            for n in range(7):
                shipper.add(f"line-{n}")
    finally:
        shipper.close()
    lines = _stored(tmp_path.as_uri(), "controller", "c")
    dropped = json.loads(lines[0])
    assert ("daemon_log_lines_dropped", 3) == (dropped["event"], dropped["count"])
    assert ["line-3", "line-4", "line-5", "line-6"] == lines[1:]


def test_each_start_is_a_segment_and_old_ones_are_pruned(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process start is a segment; only the newest KEEP_SEGMENTS stay; reading merges them in order."""
    monkeypatch.setattr(daemon_logs, "KEEP_SEGMENTS", 2)
    for n in range(3):
        shipper = DaemonLogShipper(store, "worker", "w")
        shipper.add(f"run-{n}")
        shipper.close()
    assert ["run-1", "run-2"] == _stored(store, "worker", "w")


def test_iris_logs_shows_a_workers_and_the_controllers_own_log(cluster: Cluster, client: IrisClient) -> None:
    """An operator lists the daemons with logs and reads the agent that ran a task, and the controller."""
    job = client.submit_command(["true"], name="daemon-logs", resources=ResourceSpec(cpu=0.5, memory="256m"))
    job.wait(timeout=60)
    worker = client.task_status(job.job_id, 0).worker_id
    listing = iris(cluster, "logs", "list")
    assert 0 == listing.returncode, listing.stderr
    assert worker in listing.stdout and socket.gethostname() in listing.stdout

    def task_events() -> list[dict[str, object]] | None:
        """The job's events once both its start and its exit were shipped (they may go in different batches)."""
        result = iris(cluster, "logs", "worker", worker)
        events = [json.loads(line) for line in result.stdout.splitlines()]
        ours = [e for e in events if e.get("job_id") == job.job_id]
        return ours if {"task_started", "task_exited"} <= {str(e["event"]) for e in ours} else None

    events = wait_until(task_events, timeout=30, what=f"{job.job_id}'s start and exit in {worker}'s log")
    assert all(e["worker_id"] == worker for e in events)
    controller = iris(cluster, "logs", "controller", socket.gethostname(), "--tail", "3", "--since", "1h")
    assert 0 == controller.returncode, controller.stderr
    assert 1 <= len(controller.stdout.splitlines()) <= 3
    assert all("event" in json.loads(line) for line in controller.stdout.splitlines())
    only = iris(cluster, "logs", "controller", "--tail", "1")  # one controller: no id needed
    assert 0 == only.returncode and 1 == len(only.stdout.splitlines()), only.stderr


def test_logs_of_an_unknown_daemon_name_the_ones_there_are(cluster: Cluster) -> None:
    """A worker id with no logs is one line, exit 1, naming the workers that have logs."""
    result = iris(cluster, "logs", "worker", "no-such-worker")
    assert 1 == result.returncode
    assert 1 == len(result.stderr.strip().splitlines())
    assert "no-such-worker" in result.stderr and "slice-a-0" in result.stderr
