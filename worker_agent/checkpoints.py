"""`IRIS_CHECKPOINT_DIR`: one directory per task that every attempt of that task gets.

Why: a preempted attempt's progress must reach the next attempt, wherever it runs. The job names
a root (`submit(..., checkpoint_dir=...)`); task i's directory is `<root>/<i>`, the same for all its
attempts. A local path (or a `file://` URL) is handed over as a path, made on the host before the
task starts; an object-store URL (`gs://`, `s3://`, ...) is handed over as a URL for the task to
open through fsspec.

The job's env carries the root under the same name; the agent replaces it with the task's own.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHECKPOINT_DIR_ENV = "IRIS_CHECKPOINT_DIR"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def checkpoint_root(value: object, field: str = "checkpoint_dir") -> str:
    """The job's checkpoint root as the agent gets it: an absolute path, or an object-store URL.

    A relative path is made absolute against the submitter's working directory; ValueError names
    `field` when the value is not a non-empty string or is a `file://` URL with a host.
    """
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise ValueError(f"{field} must be a non-empty path or URL, got {value!r}")
    text = str(value).strip()
    if "\0" in text or "\n" in text:
        raise ValueError(f"{field} must not contain NUL or newlines")
    if text.startswith("file://"):
        url = urlsplit(text)  # file:///abs and file://localhost/abs alike (RFC 8089); %20 is a space
        if url.netloc not in ("", "localhost") or not url.path.startswith("/"):
            raise ValueError(f"{field}: a file:// URL must name an absolute path on the workers, got {text!r}")
        return os.path.normpath(unquote(url.path))
    if _URL.match(text):
        if not text.split("://", 1)[1].strip("/"):  # "gs://": a store, but no bucket to put the checkpoints in
            raise ValueError(f"{field}: {text!r} names no bucket or path after its scheme")
        if "?" in text or "#" in text:  # a task's directory is appended to the path: a query would swallow it
            raise ValueError(f"{field}: {text!r} has a query or fragment; give the directory's URL alone")
        return text.rstrip("/")
    if "://" in text or text.lower().startswith("file:"):  # a URL gone wrong, not a directory named so
        raise ValueError(f"{field}: {text!r} is neither a path nor a URL (a URL is scheme://..., e.g. "
                         "file:///abs/path or gs://bucket/dir)")  # fmt: skip
    return str(Path(text).expanduser().absolute())


def task_checkpoint_dir(root: str, task_index: int) -> str:
    """Task `task_index`'s directory under the job's root: a path or a URL, as the root is."""
    if _URL.match(root):
        return f"{root.rstrip('/')}/{task_index}"
    return str(Path(root) / str(task_index))


def is_local(directory: str) -> bool:
    """Whether the directory is a path on the worker (else a URL the task opens itself)."""
    return not _URL.match(directory)


def make_local(directory: str) -> Path:
    """Create a local checkpoint directory (parents too); the runtime hands it to the task as a writable mount."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    return path
