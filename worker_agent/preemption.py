"""The host's preemption notice: the cloud's warning that it is about to take this VM back.

Why: a task on spot capacity that learns of its preemption only by dying loses everything since
its last checkpoint. A notice gives it the rest of the cloud's window to save its progress.

On GCP (TPU VMs and GCE) the metadata server answers `instance/preempted` (`TRUE` once a spot or
preemptible VM is being preempted; the VM has about 30 s) and `instance/maintenance-event`
(`TERMINATE_ON_HOST_MAINTENANCE` before a maintenance that stops the VM; about 60 s). The watcher
long-polls both with `?wait_for_change=true` (and the last ETag, so a change between two polls is
not missed), at `$GCE_METADATA_HOST` as google-auth finds it, and reports the first notice once.
Its threads are daemons: a long poll in flight never holds up the agent's exit.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from worker_agent.tpu_metadata import MetadataUnavailable, metadata_host

log = structlog.get_logger("iris.preemption")

PREEMPTED_KEY = "instance/preempted"
MAINTENANCE_KEY = "instance/maintenance-event"
_INSTANCE_PATH = "/computeMetadata/v1/"
NOTICE_FILE_ENV = "IRIS_PREEMPTION_NOTICE_FILE"  # every task's: a path that appears when a notice comes
NOTICE_FILE_NAME = "preemption-notice"  # where that path is: in the attempt's own area


def post_notice_file(path: Path, text: str) -> None:
    """Make the notice file appear whole: a task that sees it (`iris.preemption_notice()`) reads its reason at
    once, never a file created but not written yet (written beside it, then renamed into place)."""
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_text(text + "\n")
    temporary.replace(path)
GCP_PREEMPTION_WINDOW_SECONDS = 30.0  # what GCP gives a spot VM between the notice and the stop
GCP_MAINTENANCE_WINDOW_SECONDS = 60.0  # what it gives before a terminating host maintenance
WAIT_SECONDS = 60  # one long poll's bound (the server answers at once when the value changed)
RETRY_SECONDS = 5.0  # pause after a failed poll (the metadata server restarting, a network blip)


@dataclass(frozen=True)
class Notice:
    """A notice for this host: why (named for the user), and how long the cloud gives before it acts."""

    reason: str
    window_seconds: float

    def __post_init__(self) -> None:
        if not self.reason:
            raise ValueError("reason must name the notice's cause")
        if self.window_seconds < 0:
            raise ValueError(f"window_seconds must be >= 0, got {self.window_seconds}")


def gcp_notice(key: str, value: str) -> Notice | None:
    """The notice a metadata value means, or None (`FALSE`, `NONE`, a live migration)."""
    value = value.strip()
    if key == PREEMPTED_KEY and value.upper() == "TRUE":
        return Notice(f"GCP preemption notice ({PREEMPTED_KEY}={value})", GCP_PREEMPTION_WINDOW_SECONDS)
    if key == MAINTENANCE_KEY and value.upper().startswith("TERMINATE"):
        return Notice(f"GCP maintenance notice ({MAINTENANCE_KEY}={value})", GCP_MAINTENANCE_WINDOW_SECONDS)
    return None


def read_value(key: str, etag: str = "", wait_seconds: int = WAIT_SECONDS) -> tuple[str, str]:
    """`key`'s value and ETag; with `etag`, waits (at most `wait_seconds`) until the value differs from it."""
    url = f"http://{metadata_host()}{_INSTANCE_PATH}{key}"
    if etag:
        url += f"?wait_for_change=true&last_etag={etag}&timeout_sec={wait_seconds}"
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=wait_seconds + 10 if etag else 5) as response:
            if response.headers.get("Metadata-Flavor") != "Google":
                raise MetadataUnavailable(f"{metadata_host()} is not a GCE metadata server")
            return response.read().decode(), response.headers.get("ETag", "") or ""
    except urllib.error.HTTPError as e:
        raise MetadataUnavailable(f"metadata {key}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise MetadataUnavailable(f"metadata server {metadata_host()}: {getattr(e, 'reason', e)}") from None


class GcpNoticeWatcher:
    """Long-polls the metadata server's preemption and maintenance keys; calls `on_notice` once, from its thread."""

    def __init__(self, on_notice: Callable[[Notice], None], *, wait_seconds: int = WAIT_SECONDS,
                 retry_seconds: float = RETRY_SECONDS) -> None:  # fmt: skip
        self._on_notice = on_notice
        self._wait_seconds = wait_seconds
        self._retry_seconds = retry_seconds
        self._stopped = threading.Event()
        self._told = threading.Lock()
        self._notified = False
        self._threads: list[threading.Thread] = []

    def start(self) -> GcpNoticeWatcher:
        for key in (PREEMPTED_KEY, MAINTENANCE_KEY):
            thread = threading.Thread(target=self._watch, args=(key,), name=f"notice:{key}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("preemption_watch_started", metadata_host=metadata_host())
        return self

    def stop(self) -> None:
        """No more notices; a poll in flight ends on its own (its thread is a daemon)."""
        self._stopped.set()

    def _watch(self, key: str) -> None:
        etag = ""
        while not self._stopped.is_set():
            try:
                value, etag = read_value(key, etag, self._wait_seconds)
            except MetadataUnavailable as e:
                log.warning("preemption_watch_failed", key=key, error=str(e), retry_in=self._retry_seconds)
                etag = ""
                self._stopped.wait(self._retry_seconds)
                continue
            notice = gcp_notice(key, value)
            if notice is not None:
                self._tell(notice)
                return
            if not etag:  # a server without ETags cannot be waited on: poll it
                self._stopped.wait(1.0)

    def _tell(self, notice: Notice) -> None:
        with self._told:
            if self._notified or self._stopped.is_set():
                return
            self._notified = True
        log.warning("preemption_notice", reason=notice.reason, window_seconds=notice.window_seconds)
        self._on_notice(notice)
