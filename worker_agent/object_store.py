"""The shared store on object storage: blobs and task logs behind fsspec URLs (`gs://`, `s3://`, ...).

Why: across machines, the client, the agents and the CLI cannot share a directory; they share a
bucket. `open_blob_store(url)` and `open_log_store(url)` pick the backend from the URL: `file://`
(or a plain path) keeps the directory stores of `worker_agent.storage` (atomic renames, no extra
dependency), any other scheme goes through fsspec (`gs://` needs `gcsfs`, `s3://` needs `s3fs`:
the `gcs` and `s3` extras). Credentials are the library's usual ones (ADC for GCS; `AWS_*`
variables, including `AWS_ENDPOINT_URL` for CoreWeave's or any S3-compatible endpoint).

Objects cannot be appended to, so a task's log is a series of chunk objects
(`<job>/task-<i>/attempt-<n>/chunk-<seq>`): the task writes to a local spool file (a real file
descriptor, as runtimes need), a shipper thread uploads what is new every `SHIP_SECONDS`, and a
reader resumes from a byte offset by skipping whole chunks. No object is ever rewritten.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import fsspec

from worker_agent.encryption import KeyMismatchError, Sealer, load_key
from worker_agent.storage import (
    BlobNotFoundError,
    BlobStore,
    LogCursor,
    LogReading,
    LogStore,
    LogStoreError,
    LogWriter,
    StorageError,
    _split_key,
    encode_component,
)

__all__ = [
    "BlobKeyError",
    "Blobs",
    "Logs",
    "ObjectBlobStore",
    "ObjectLogStore",
    "SealedBlobs",
    "open_blob_store",
    "open_log_store",
]

SHIP_SECONDS: Final = 0.5
_CHUNK_PREFIX: Final = "chunk-"


class Blobs(Protocol):
    """What the client and the agent need of a blob store, whatever it is backed by."""

    @property
    def url(self) -> str: ...
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...


class Logs(Protocol):
    """What the agent (writing) and the client (reading with a cursor) need of a log store."""

    @property
    def url(self) -> str: ...
    def open_writer(self, job_id: str, task_index: int, attempt: int) -> LogWriter: ...
    def read_lines(self, job_id: str, task_index: int) -> list[str]: ...
    def read_bytes(self, job_id: str, task_index: int) -> bytes: ...
    def read_new(
        self, job_id: str, task_index: int, cursor: LogCursor | None = None, *, final: bool = False
    ) -> tuple[list[str], LogCursor]: ...
    def read_new_bytes(
        self, job_id: str, task_index: int, cursor: LogCursor | None = None, *, final: bool = False
    ) -> tuple[bytes, LogCursor]: ...
    def cursor_since(self, job_id: str, task_index: int, since: float) -> LogCursor: ...
    def attempts(self, job_id: str, task_index: int) -> list[int]: ...
    def attempt_marks(self, job_id: str, task_index: int, attempt: int) -> list[tuple[int, float]]: ...


def is_local(url: str) -> bool:
    """`file://` URLs and plain absolute paths are directories on this machine."""
    return url.startswith("/") or urlsplit(url).scheme == "file"


def _filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and root path for `url`; a missing backend is a one-line error naming the extra."""
    scheme = urlsplit(url).scheme
    try:
        # Listing caches would hide chunks written by another process after the first listing.
        fs, root = fsspec.core.url_to_fs(url, use_listings_cache=False, skip_instance_cache=True)
    except ImportError as err:
        extra = {"gs": "gcs", "gcs": "gcs", "s3": "s3"}.get(scheme, scheme)
        raise ValueError(f"store URL {url!r} needs the {extra!r} extra: pip install 'iris[{extra}]' ({err})") from None
    except ValueError as err:
        raise ValueError(f"store URL {url!r}: {err}") from None
    return fs, root.rstrip("/")


FROM_ENV: Final = "from the environment"
"""`open_blob_store`'s default key: the process's codec key (IRIS_CODEC_KEY / IRIS_CODEC_KEY_FILE), if any."""


def open_blob_store(url: str, key: bytes | str | None = FROM_ENV) -> Blobs:
    """The blob store named by `url`: a directory for `file://`, an object store otherwise.

    With a codec key (by default the process's own), every blob is sealed on `put` and opened on
    `get` (`SealedBlobs`): functions, arguments, launches, results and bundles rest encrypted.
    """
    store: Blobs = BlobStore.from_url(url) if is_local(url) else ObjectBlobStore(url)
    if key == FROM_ENV:
        key = load_key()
    if isinstance(key, bytes):
        return SealedBlobs(store, Sealer(key))
    return store


class BlobKeyError(StorageError, ValueError):
    """A blob sealed under another key, or not sealed while this process holds a key; names both key ids."""


@dataclass
class SealedBlobs:
    """A blob store whose blobs rest encrypted under the process's codec key (AES-256-GCM, see encryption).

    Each blob is bound to its own key in the store, so one cannot be passed off as another. A
    blob written without a key is refused, not trusted: with encryption on, only a key holder can
    hand a worker a function to run.
    """

    inner: Blobs
    sealer: Sealer

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def key_id(self) -> str:
        return self.sealer.key_id

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, self.sealer.seal(data, key))

    def get(self, key: str) -> bytes:
        try:
            return self.sealer.open(self.inner.get(key), key, f"blob {key!r}")
        except KeyMismatchError as err:
            raise BlobKeyError(str(err)) from None

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def content_key(self, key: str) -> str:
        """A content-addressed key (`bundles/<sha256>.zip`) made private to this key: an HMAC of the digest.

        The plain digest would let anyone who guesses a bundle's contents confirm them, and a
        re-keyed deployment would find the old key's blob under the same name.
        """
        return self.sealer.private_name(key)


def open_log_store(url: str) -> Logs:
    """The log store named by `url` (usually `<store>/logs`)."""
    if is_local(url):
        return LogStore.from_url(url)
    return ObjectLogStore(url)  # reading (cursor, attempts merged) is LogReading's, as for LogStore


@dataclass
class ObjectBlobStore:
    """Immutable blobs as objects; a put is one whole-object upload, so readers never see a torn blob."""

    url: str
    fs: Any = field(init=False, repr=False)
    root: str = field(init=False)

    def __post_init__(self) -> None:
        self.fs, self.root = _filesystem(self.url)

    def path_for(self, key: str) -> str:
        return "/".join([self.root, *_split_key(key)])

    def put(self, key: str, data: bytes) -> None:
        path = self.path_for(key)
        try:
            self.fs.pipe_file(path, data)
        except OSError as err:
            raise StorageError(f"cannot store blob {key!r} at {path}: {err}") from err

    def get(self, key: str) -> bytes:
        path = self.path_for(key)
        try:
            data: bytes = self.fs.cat_file(path)
        except FileNotFoundError:
            raise BlobNotFoundError(key, Path(path)) from None
        except OSError as err:
            raise StorageError(f"cannot read blob {key!r} at {path}: {err}") from err
        return data

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path_for(key)))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path_for(key))


class _ShippingLogWriter(LogWriter):
    """A local spool file whose new bytes a thread uploads as numbered chunk objects; close ships the rest."""

    def __init__(self, store: ObjectLogStore, prefix: str, spool: Path) -> None:
        super().__init__(spool)
        self._store, self._prefix, self._spool = store, prefix, spool
        self._shipped = 0
        self._seq = store._next_sequence(prefix)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"log-shipper {prefix}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SHIP_SECONDS):
            with contextlib.suppress(OSError, StorageError):  # retried on the next tick or at close
                self._ship()

    def _ship(self) -> None:
        with self._lock:
            with open(self._spool, "rb") as spool:
                spool.seek(self._shipped)
                data = spool.read()
            if not data:
                return
            self._store._put_chunk(self._prefix, self._seq, data)
            self._seq += 1
            self._shipped += len(data)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._stop.set()
        self._thread.join()
        try:
            self._ship()
        except OSError as err:
            raise LogStoreError(f"cannot upload the end of log {self._prefix}: {err}") from err
        finally:
            self._spool.unlink(missing_ok=True)


@dataclass
class ObjectLogStore(LogReading):
    """Task logs as chunk objects, `<root>/<job>/task-<i>/attempt-<n>/chunk-<seq>`, read back by byte offset."""

    url: str
    fs: Any = field(init=False, repr=False)
    root: str = field(init=False)

    def __post_init__(self) -> None:
        self.fs, self.root = _filesystem(self.url)

    def _attempt_prefix(self, job_id: str, task_index: int, attempt: int) -> str:
        if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
            raise ValueError(f"task_index must be a non-negative int, got {task_index!r}")
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
            raise ValueError(f"attempt must be a non-negative int, got {attempt!r}")
        return f"{self.root}/{encode_component(job_id)}/task-{task_index}/attempt-{attempt}"

    def _chunks(self, prefix: str) -> list[tuple[str, int]]:
        """(path, size) of an attempt's chunks in write order."""
        try:
            entries = self.fs.ls(prefix, detail=True)
        except FileNotFoundError:
            return []
        except OSError as err:
            raise LogStoreError(f"cannot list log chunks under {prefix}: {err}") from err
        chunks = [(e["name"], int(e["size"])) for e in entries
                  if e.get("type") == "file" and e["name"].rsplit("/", 1)[-1].startswith(_CHUNK_PREFIX)]
        return sorted(chunks)

    def _next_sequence(self, prefix: str) -> int:
        """A restarted writer of one attempt continues after the chunks already there."""
        return len(self._chunks(prefix))

    def _put_chunk(self, prefix: str, seq: int, data: bytes) -> None:
        """`chunk-<seq>-<unix ms>`: the name says when its bytes had been written (for `logs --since`)."""
        self.fs.pipe_file(f"{prefix}/{_CHUNK_PREFIX}{seq:08d}-{math.ceil(time.time() * 1000)}", data)

    def attempt_marks(self, job_id: str, task_index: int, attempt: int) -> list[tuple[int, float]]:
        marks, end = [], 0
        for path, size in self._chunks(self._attempt_prefix(job_id, task_index, attempt)):
            end += size
            _, _, millis = path.rsplit("/", 1)[-1].removeprefix(_CHUNK_PREFIX).partition("-")
            if millis.isdecimal():
                marks.append((end, int(millis) / 1000))
        return marks

    def open_writer(self, job_id: str, task_index: int, attempt: int) -> LogWriter:
        prefix = self._attempt_prefix(job_id, task_index, attempt)
        fd, name = tempfile.mkstemp(prefix="iris-log-", suffix=".spool")
        os.close(fd)
        return _ShippingLogWriter(self, prefix, Path(name))

    def attempts(self, job_id: str, task_index: int) -> list[int]:
        task_prefix = self._attempt_prefix(job_id, task_index, 0).rsplit("/", 1)[0]
        try:
            names = [e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(task_prefix, detail=False)]
        except FileNotFoundError:
            return []
        numbers = [n.removeprefix("attempt-") for n in names if n.startswith("attempt-")]
        return sorted(int(n) for n in numbers if n.isdecimal())

    def read_attempt(self, job_id: str, task_index: int, attempt: int, offset: int) -> bytes:
        """The attempt's bytes from `offset` on, fetching only the chunks that hold them."""
        parts, position = [], 0
        for path, size in self._chunks(self._attempt_prefix(job_id, task_index, attempt)):
            end = position + size
            if end > offset:
                data: bytes = self.fs.cat_file(path)
                parts.append(data[max(0, offset - position):])
            position = end
        return b"".join(parts)
