"""A task attempt's own directory on the worker host: its inputs, its outputs, its working directory.

Why: a task must not read other jobs' logs and results nor overwrite their function blobs, so it
never sees the shared store. The agent copies the task's inputs (its pickled function) into a
small store of the task's own (``store/``, same keys as the shared store), runs the task there
with ``work/`` as its working directory, and afterwards copies the task's outputs (its result or
error blob) back to the shared store. Container runtimes mount this directory and nothing else of
the host's paths; the process runtime hands it to the unprivileged user tasks run as.

Layout: ``<root>/<job id, encoded>/task-<index>-attempt-<attempt>/{store,work}``; the root and
job directories are traversable but not listable by others (0711), so a task finds its own area
but cannot enumerate its neighbours'.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from worker_agent.storage import BlobNotFoundError, BlobStore, encode_component
from worker_agent.task_runner import error_key

if TYPE_CHECKING:
    from worker_agent.object_store import Blobs

__all__ = ["TaskArea", "stage_runner_code"]

_TRAVERSE_ONLY: Final = 0o711
_PRIVATE: Final = 0o700
_CREATE_TRIES: Final = 3


@dataclass(frozen=True)
class TaskArea:
    """The directory of one attempt; create with ``TaskArea.create``, drop with ``remove``."""

    path: Path

    @classmethod
    def at(cls, root: Path, job_id: str, task_index: int, attempt: int) -> TaskArea:
        """The area of this attempt under ``root`` (not created yet)."""
        return cls(root / encode_component(job_id) / f"task-{task_index}-attempt-{attempt}")

    def create(self) -> None:
        """Make the area fresh and empty (one left by a crashed agent for this attempt is replaced).

        A sibling task's `remove` may take the job's directory while it is empty, between any two
        steps here, until this area is in it; then the steps are taken again. (`mkdir(exist_ok=True)`
        raises FileExistsError when the directory was there for mkdir and gone when it checked.)
        """
        shutil.rmtree(self.path, ignore_errors=True)
        for attempt in range(_CREATE_TRIES):
            try:
                for directory in (self.path.parent.parent, self.path.parent):
                    directory.mkdir(parents=True, exist_ok=True)
                    directory.chmod(_TRAVERSE_ONLY)
                self.path.mkdir(mode=_PRIVATE)
                break
            except (FileNotFoundError, FileExistsError):
                if attempt == _CREATE_TRIES - 1:
                    raise
        self.store_dir.mkdir()
        self.work_dir.mkdir()

    @property
    def store_dir(self) -> Path:
        """The task's own store: its inputs in, its outputs out, under the shared store's keys."""
        return self.path / "store"

    @property
    def work_dir(self) -> Path:
        """The task's working directory (writable scratch space)."""
        return self.path / "work"

    @property
    def store_url(self) -> str:
        """The URL the task runner is given for the task's own store."""
        return self.store_dir.as_uri()

    def stage_function(self, shared: Blobs, function_key: str) -> None:
        """Copy the pickled function from the shared store; BlobNotFoundError if it is missing."""
        BlobStore(self.store_dir, durable=False).put(function_key, shared.get(function_key))

    def publish_outputs(self, shared: Blobs, result_key: str) -> bool:
        """Copy the task's result and its error note (whichever it wrote) to the shared store; whether it
        wrote a result."""
        own = BlobStore(self.store_dir)
        wrote = []
        for key in (result_key, error_key(result_key)):
            try:
                data = own.get(key)
            except BlobNotFoundError:
                continue
            shared.put(key, data)
            wrote.append(key)
        return result_key in wrote

    def remove(self) -> None:
        """Delete the area and everything the task left in it, and the job's directory once it is empty.

        A long-lived host runs thousands of jobs; an empty directory left per job is clutter that
        never goes away. The job's other tasks on this host keep it while their areas exist.
        """
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty (another task of the job) or gone already
            self.path.parent.rmdir()


_RUNNER_MODULES: Final = ("__init__.py", "task_runner.py", "blob_files.py", "shipped_call.py")
_STAGED_FORMAT: Final = b"sources+bytecode\0"  # in the digest: a copy staged without bytecode is not reused


def stage_runner_code(root: Path) -> Path:
    """A read-only copy of the task runner's code under ``root``, made once per version; its directory.

    Containers mount this copy rather than the agent's own install, so the runner reaches a task
    even when the agent runs in a container of its own (its packages are not on the engine's
    host, but ``root`` must be). The directory is named by a digest of the files, so an upgraded
    agent never mixes versions, and it is created by an atomic rename, so concurrent agents on
    one host may race safely.

    The copy holds bytecode compiled by this interpreter: the mount is read-only, so without it a
    container's Python of the same version compiled the runner and cloudpickle from source on
    every task (~12 ms of the task's CPU here); another version compiles in memory as before.
    """
    import compileall

    import cloudpickle

    import worker_agent

    agent_dir = Path(worker_agent.__file__ or "").resolve().parent
    pickle_dir = Path(cloudpickle.__file__ or "").resolve().parent
    sources = [agent_dir / name for name in _RUNNER_MODULES] + sorted(pickle_dir.glob("*.py"))
    digest = hashlib.sha256(_STAGED_FORMAT)
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    target = root / ".runner" / digest.hexdigest()[:16]
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    split = len(_RUNNER_MODULES)
    for package, files in (("worker_agent", sources[:split]), ("cloudpickle", sources[split:])):
        (building / package).mkdir()
        for source in files:
            shutil.copyfile(source, building / package / source.name)
            (building / package / source.name).chmod(0o644)
        (building / package).chmod(0o755)
    compileall.compile_dir(building, quiet=1, workers=1)
    for cached in building.rglob("__pycache__"):
        cached.chmod(0o755)
        for compiled in cached.iterdir():
            compiled.chmod(0o644)
    building.chmod(0o755)
    try:
        building.rename(target)
    except OSError:  # another agent staged the same version first
        shutil.rmtree(building, ignore_errors=True)
    return target
