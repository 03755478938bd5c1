"""The host's preemption notice from a GCE metadata server (the fake on loopback), and what a task reads of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.preemption import PreemptionNotice
from tests.platforms.tpu_fake import FakeMetadata
from worker_agent.checkpoints import checkpoint_root, task_checkpoint_dir
from worker_agent.preemption import GcpNoticeWatcher, Notice, gcp_notice, post_notice_file


@pytest.fixture
def metadata(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMetadata]:
    server = FakeMetadata({})
    monkeypatch.setenv("GCE_METADATA_HOST", server.host)
    try:
        yield server
    finally:
        server.stop()


def polled(metadata: FakeMetadata, key: str, at_least: int) -> int:
    """Wait until the watcher has sent `at_least` long polls of `key`; how many it has."""
    deadline = time.monotonic() + 10
    while (n := sum(key in path and "wait_for_change=true" in path for path, _ in metadata.requests)) < at_least:
        assert time.monotonic() < deadline, f"the watcher sent {n} long polls of {key}, not {at_least}"
        time.sleep(0.02)
    return n


def watch(notices: list[tuple[Notice, float]], told: threading.Event) -> GcpNoticeWatcher:
    def on_notice(notice: Notice) -> None:
        notices.append((notice, time.time()))
        told.set()

    return GcpNoticeWatcher(on_notice, wait_seconds=30).start()


@pytest.mark.parametrize(
    ("key", "value", "cause"),
    [("preempted", "TRUE", "GCP preemption notice"), ("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE",
                                                        "GCP maintenance notice")],
)  # fmt: skip
def test_notice_arrives_within_a_second(metadata: FakeMetadata, key: str, value: str, cause: str) -> None:
    """A value turning to its notice reaches the watcher within 1 s, through a held wait_for_change poll."""
    notices: list[tuple[Notice, float]] = []
    told = threading.Event()
    watcher = watch(notices, told)
    try:
        deadline = time.monotonic() + 10
        while not any("wait_for_change=true" in path for path, _ in metadata.requests):  # the long polls are held
            assert time.monotonic() < deadline, "the watcher never waited for a change"
            time.sleep(0.02)
        changed = metadata.set_instance(key, value)
        assert told.wait(5), "no notice"
        ((notice, at),) = notices
        assert notice.reason.startswith(cause) and value in notice.reason
        assert at - changed < 1.0
        assert all(flavor == "Google" for _, flavor in metadata.requests)
    finally:
        watcher.stop()


def test_live_migration_is_no_notice(metadata: FakeMetadata) -> None:
    """A maintenance that migrates the VM live stops nothing; a later preemption is still told, once."""
    notices: list[tuple[Notice, float]] = []
    told = threading.Event()
    watcher = watch(notices, told)
    try:
        polls = polled(metadata, "maintenance-event", 1)  # the watcher holds a poll of the value
        metadata.set_instance("maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        polled(metadata, "maintenance-event", polls + 1)  # it read the migration and waits for the next change
        assert not told.is_set()
        metadata.set_instance("preempted", "TRUE")
        metadata.set_instance("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        assert told.wait(5)
        time.sleep(0.3)
        assert 1 == len(notices)
    finally:
        watcher.stop()


def test_gcp_notice_values() -> None:
    """Which metadata values are notices, and how long each gives."""
    assert gcp_notice("instance/preempted", "FALSE") is None
    assert gcp_notice("instance/maintenance-event", "NONE") is None
    notice = gcp_notice("instance/preempted", "TRUE\n")
    assert notice is not None and 30.0 == notice.window_seconds
    maintenance = gcp_notice("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    assert maintenance is not None and 60.0 == maintenance.window_seconds
    with pytest.raises(ValueError, match="window_seconds"):
        Notice("x", -1)


def test_task_side_notice(tmp_path: Path) -> None:
    """`preemption_notice()` is set once the notice file exists; wait() returns then, or False at its timeout."""
    path = tmp_path / "preemption-notice"
    notice = PreemptionNotice(path)
    assert not notice.is_set()
    assert not notice.wait(0.1)
    threading.Timer(0.2, lambda: post_notice_file(path, "GCP preemption notice")).start()  # as the agent does
    assert notice.wait(5)
    assert notice.is_set() and "GCP preemption notice" == notice.reason()
    assert not PreemptionNotice(None).is_set()
    with pytest.raises(ValueError, match="timeout"):
        notice.wait(-1)


def test_checkpoint_dirs(tmp_path: Path) -> None:
    """Task i's directory: <root>/<i>; a path or file:// URL is a local path, an object store's URL stays a URL."""
    assert str(tmp_path / "ck") == checkpoint_root(f"file://{tmp_path}/ck")
    assert str(tmp_path / "ck" / "3") == task_checkpoint_dir(checkpoint_root(tmp_path / "ck"), 3)
    assert "gs://bucket/run-1/0" == task_checkpoint_dir(checkpoint_root("gs://bucket/run-1/"), 0)
    assert Path(checkpoint_root("relative/dir")).is_absolute()
    with pytest.raises(ValueError, match="checkpoint_dir"):
        checkpoint_root("")
    with pytest.raises(ValueError, match="checkpoint_dir: a file:// URL"):
        checkpoint_root("file://host/path")
    with pytest.raises(ValueError, match="checkpoint_dir: 'gs://' names no bucket"):
        checkpoint_root("gs://")  # refused at submit, not on the worker
    for odd in ("://x", "file:relative"):
        with pytest.raises(ValueError, match="is neither a path nor a URL"):
            checkpoint_root(odd)
