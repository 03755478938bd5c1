"""A job's bundle on a worker: unpacked once with its file modes, reused, and swept once unused."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from iris.client.bundle import zip_bundle
from worker_agent.bundles import UNPACKED, Bundles
from worker_agent.object_store import open_blob_store


def _bundles(tmp_path: Path) -> tuple[Bundles, str]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (project / "run.sh").chmod(0o755)
    key, data = zip_bundle(project)
    blobs = open_blob_store((tmp_path / "store").as_uri())
    blobs.put(key, data)
    return Bundles(tmp_path / "bundles", blobs), key


def test_a_bundle_is_unpacked_once_with_its_modes(tmp_path: Path) -> None:
    bundles, key = _bundles(tmp_path)
    directory = asyncio.run(bundles.prepare("job-a", key))
    assert os.access(directory / "run.sh", os.X_OK)
    (directory / "made-by-setup").write_text("x")
    assert directory == asyncio.run(bundles.prepare("job-a", key))
    assert (directory / "made-by-setup").exists()  # not unpacked again


def test_bundles_unused_for_a_week_are_swept_and_the_others_kept(tmp_path: Path) -> None:
    bundles, key = _bundles(tmp_path)
    old = asyncio.run(bundles.prepare("job-old", key))
    recent = asyncio.run(bundles.prepare("job-recent", key))
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(old / UNPACKED, (week_ago, week_ago))
    assert ["job-old"] == bundles.sweep()
    assert not old.exists() and recent.exists()
