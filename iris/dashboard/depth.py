"""The queue-depth samples kept in the store, so the picture survives a controller restart.

The samples are the dashboard's own (the scheduler's summary every few seconds, see
`Dashboard._sample`); Temporal keeps no history of the queue's length. One small blob, rewritten
whole every SAVE_SECONDS (atomic, bounded: at most DepthHistory's last hour, ~20 KB), read once
when the dashboard starts. Several controllers serving dashboards write the same samples of the
same scheduler; the last write wins. A store the dashboard cannot use (e.g. an in-memory one in a
bench) leaves the picture in memory only.
"""

from __future__ import annotations

import json
import time

import structlog

from iris.dashboard.charts import DepthHistory
from worker_agent.storage import BlobNotFoundError, BlobStore, StorageError

log = structlog.get_logger("iris.dashboard")
DEPTH_KEY = "dashboard/queue-depth.json"
SAVE_SECONDS = 60.0
"""How often the samples are written (a restart loses at most this much of the picture)."""
KEEP_SECONDS = 3600.0
"""Samples older than this are not loaded back (the picture shows the last hour)."""


class DepthStore:
    """Loads and saves a `DepthHistory` under DEPTH_KEY of the cluster's store (blocking: call in a thread)."""

    def __init__(self, store_url: str) -> None:
        self._store: BlobStore | None = None
        try:
            self._store = BlobStore.from_url(store_url)
        except (ValueError, StorageError) as err:
            log.info("dashboard_depth_in_memory", store=store_url, reason=str(err))

    def load(self, into: DepthHistory, now: float | None = None) -> int:
        """Put the saved samples of the last KEEP_SECONDS before the ones `into` has; how many were loaded."""
        if self._store is None:
            return 0
        try:
            saved = json.loads(self._store.get(DEPTH_KEY))
            cutoff = (time.time() if now is None else now) - KEEP_SECONDS
            first = into.samples[0][0] if into.samples else float("inf")
            old = [(float(at), int(depth)) for at, depth in saved if cutoff <= float(at) < first]
        except BlobNotFoundError:
            return 0
        except (StorageError, ValueError, TypeError) as err:  # unreadable: start a fresh picture
            log.warning("dashboard_depth_unreadable", error=str(err))
            return 0
        keep = list(into.samples)
        into.samples.clear()
        into.samples.extend([*old, *keep][-(into.samples.maxlen or len(old) + len(keep)) :])
        return len(old)

    def save(self, history: DepthHistory) -> None:
        if self._store is None:
            return
        try:
            self._store.put(DEPTH_KEY, json.dumps([[round(at, 1), d] for at, d in history.samples]).encode())
        except StorageError as err:
            log.warning("dashboard_depth_not_saved", error=str(err))
