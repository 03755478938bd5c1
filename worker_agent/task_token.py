"""Task tokens: the credential a task of a team-mode cluster reaches the Iris API with, instead of Temporal.

A task runs code its user submitted, so it must hold nothing that opens Temporal (whoever does acts
outside every check). It gets the Iris API's address and a token naming its job, which the agent mints
with a key only the control plane holds (HMAC-SHA256 over the job id, under a random 256-bit key kept
in the store at `KEY_BLOB`; the controllers create it, the agents read it). The API accepts the token
as the job's user while the job runs (a child job belongs to its root job's user) and makes what the
task submits a child of the job; once the job has ended the token opens nothing. The key never
reaches a task: its token says which job it speaks for, and no task can mint one for another.

Format: `iris-task:<job id, base64url>:<HMAC, hex>` (no dot: an OIDC JWT has two; no `iris_`
prefix: that is an issued token's).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Final

from worker_agent.blob_files import BlobNotFoundError, StorageError

if TYPE_CHECKING:  # annotations only: every `iris` command that connects reads TOKEN_FILE_ENV (fsspec: ~25 ms)
    from worker_agent.object_store import Blobs

KEY_BLOB: Final = "auth/task-token-key"
PREFIX: Final = "iris-task:"
TOKEN_FILE_NAME: Final = "iris-task.token"
TOKEN_FILE_ENV: Final = "IRIS_TOKEN_FILE"  # where any client reads its token from (iris/auth/remote.py)


class TaskTokenKeyMissingError(StorageError, LookupError):
    """The store holds no task-token key yet: no team-mode controller has started against it."""


def _mac(key: bytes, job_id: str) -> str:
    return hmac.new(key, job_id.encode(), hashlib.sha256).hexdigest()


def mint(key: bytes, job_id: str) -> str:
    """The token a task of `job_id` presents to the Iris API."""
    encoded = base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")
    return f"{PREFIX}{encoded}:{_mac(key, job_id)}"


def looks_like_task_token(token: str) -> bool:
    return token.startswith(PREFIX)


def job_of(key: bytes, token: str) -> str | None:
    """The job `token` speaks for, or None when it is malformed or was not minted with `key`."""
    try:
        encoded, mac = token.removeprefix(PREFIX).split(":")
        job_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return job_id if job_id and hmac.compare_digest(mac.encode(), _mac(key, job_id).encode()) else None


def read_key(blobs: Blobs) -> bytes:
    """The control plane's task-token key; TaskTokenKeyMissingError before a team-mode controller made one."""
    try:
        key = blobs.get(KEY_BLOB)
    except BlobNotFoundError:
        raise TaskTokenKeyMissingError(
            f"no task-token key in the store ({KEY_BLOB}): no team-mode controller has started"
        ) from None
    if len(key) < 32:
        raise TaskTokenKeyMissingError(f"the task-token key in the store ({KEY_BLOB}) is {len(key)} bytes, not 32")
    return key


def ensure_key(blobs: Blobs) -> bytes:
    """The key, made (random, 256 bits) if the store has none: what a team-mode controller does as it starts.

    Two controllers starting at once may both write one; each then reads back whichever stayed, and a
    verifier that meets a token it cannot check reads the key again (`read_key`) before refusing it.
    """
    try:
        return read_key(blobs)
    except TaskTokenKeyMissingError:
        blobs.put(KEY_BLOB, secrets.token_bytes(32))
        return read_key(blobs)


class TaskTokens:
    """An agent's side: the key read once from the store, and each attempt's token written where its task reads it."""

    def __init__(self, blobs: Blobs) -> None:
        self._blobs = blobs
        self._key: bytes | None = None

    def write(self, directory: Path, job_id: str) -> Path:
        """The job's token in `directory/TOKEN_FILE_NAME`, mode 0600 (the attempt's area: its task user's once it runs).

        TaskTokenKeyMissingError (a StorageError) when no team-mode controller has made the key yet.
        """
        if self._key is None:
            self._key = read_key(self._blobs)
        path = directory / TOKEN_FILE_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(mint(self._key, job_id))
        return path


__all__ = [
    "KEY_BLOB", "PREFIX", "TOKEN_FILE_ENV", "TOKEN_FILE_NAME", "TaskTokenKeyMissingError", "TaskTokens", "ensure_key",
    "job_of",
    "looks_like_task_token", "mint", "read_key",
]  # fmt: skip
