"""A job's code bundle on a worker host: fetched and unpacked once per job, set up once per job.

The bundle (a zip the client made of the submitter's directory, see `iris.client.bundle`)
becomes the working directory of every task of the job on this host and is on
their `PYTHONPATH`. Its setup commands (e.g. `python -m venv .venv && .venv/bin/pip
install -r requirements.txt`) run once per job and host, in that directory,
through the task's own runtime (so in the job's container image when there is
one); a marker file records success, so later tasks and retries skip it and a
failed setup is tried again by the next attempt. A job's directory is removed once no
task of it has started on this host for KEEP_SECONDS (checked at most hourly).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
import zipfile
from io import BytesIO
from pathlib import Path

from worker_agent.object_store import Blobs

UNPACKED = ".iris-unpacked"
SET_UP = ".iris-setup-done"
KEEP_SECONDS = 7 * 24 * 3600.0  # a bundle unused this long belongs to a job that has ended
SWEEP_EVERY_SECONDS = 3600.0


def _dirname(job_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", job_id)


class Bundles:
    """Unpacked bundles under `root/<job id>`; one lock per job serializes unpacking and setup."""

    def __init__(self, root: Path, blobs: Blobs) -> None:
        self.root = root
        self.blobs = blobs
        self._locks: dict[str, asyncio.Lock] = {}
        self._last_sweep = 0.0

    def lock(self, job_id: str) -> asyncio.Lock:
        return self._locks.setdefault(job_id, asyncio.Lock())

    async def prepare(self, job_id: str, key: str) -> Path:
        """The job's unpacked bundle directory (fetched from the store the first time)."""
        directory = self.root / _dirname(job_id)
        if time.time() - self._last_sweep > SWEEP_EVERY_SECONDS:
            self._last_sweep = time.time()
            await asyncio.to_thread(self.sweep, keep=directory)
        async with self.lock(job_id):
            if not (directory / UNPACKED).exists():
                data = await asyncio.to_thread(self.blobs.get, key)
                await asyncio.to_thread(_unpack, data, directory)
            os.utime(directory / UNPACKED)  # in use: not swept for another KEEP_SECONDS
        return directory

    def sweep(self, keep: Path | None = None, max_age: float = KEEP_SECONDS) -> list[str]:
        """Remove the bundles of jobs no task of which started here for `max_age` seconds; their names."""
        removed = []
        cutoff = time.time() - max_age
        for directory in self.root.glob("*") if self.root.is_dir() else []:
            try:
                used = (directory / UNPACKED).stat().st_mtime
            except OSError:
                used = directory.stat().st_mtime  # half-unpacked: its own age
            if directory != keep and used < cutoff:
                shutil.rmtree(directory, ignore_errors=True)
                removed.append(directory.name)
        return removed

    @staticmethod
    def is_set_up(directory: Path) -> bool:
        return (directory / SET_UP).exists()

    @staticmethod
    def mark_set_up(directory: Path) -> None:
        (directory / SET_UP).touch()


def _unpack(data: bytes, directory: Path) -> None:
    """Extract into a fresh directory (replacing a half-made one), keeping file modes."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    with zipfile.ZipFile(BytesIO(data)) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, directory))  # zipfile drops absolute and `..` parts
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                path.chmod(mode)
    (directory / UNPACKED).touch()
