"""The deployment's codec key and AES-256-GCM sealing, shared by Temporal payloads and the blob store.

Why one module: a process holds one key (`IRIS_CODEC_KEY`, base64 of 32 bytes, or the file named
by `IRIS_CODEC_KEY_FILE`), and everything it writes under that key (Temporal payloads through
`iris.security.codec`, store blobs through `worker_agent.object_store`) names the key by the same id, the
first 16 hex digits of its SHA-256. A reader holding another key, or none, gets one line naming
both ids (`KeyMismatchError`), whatever it was reading. The key itself never leaves the process.

A sealed blob is `MAGIC | key id (16 ASCII hex) | nonce (12) | AES-GCM(data)`, with the blob's
store key as associated data: a blob moved to another key (one job's result swapped for another
job's function) fails to open, as a tampered one does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "KeyMismatchError",
    "Sealer",
    "generate_key",
    "key_id",
    "load_key",
    "mismatch_message",
]

KEY_ENV: Final = "IRIS_CODEC_KEY"
KEY_FILE_ENV: Final = "IRIS_CODEC_KEY_FILE"
NONCE_BYTES: Final = 12
MAGIC: Final = b"IRIS-AESGCM1\n"
"""The first bytes of a sealed blob (a plaintext pickle or zip never starts with them)."""
_KEY_ID_CHARS: Final = 16


class KeyMismatchError(ValueError):
    """Data written under one key (or none) read by a process holding another; the message names both ids."""


def mismatch_message(what: str, written_with: str | None, held: str | None) -> str:
    """`<what> encrypted with key A, but this process holds key B` and its keyless variants, on one line."""
    holds = f"this process holds key {held}" if held else f"this process holds no key (set {KEY_ENV} or {KEY_FILE_ENV})"
    if written_with:
        return f"{what} encrypted with key {written_with}, but {holds}"
    return f"{what} not encrypted (written by a process without a key), but {holds}"


def generate_key() -> str:
    """A fresh key as the text IRIS_CODEC_KEY takes."""
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


def key_id(key: bytes) -> str:
    """The public name of `key`: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:_KEY_ID_CHARS]


def _parse_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: the codec key must be base64 of 32 bytes (`iris codec-key` makes one)") from None
    if len(key) != 32:
        raise ValueError(f"{where}: the codec key must be 32 bytes (AES-256), got {len(key)}")
    return key


def load_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The key from IRIS_CODEC_KEY or the file named by IRIS_CODEC_KEY_FILE; None when neither is set."""
    env = os.environ if environ is None else environ
    if env.get(KEY_ENV):
        return _parse_key(env[KEY_ENV], KEY_ENV)
    if env.get(KEY_FILE_ENV):
        path = Path(env[KEY_FILE_ENV]).expanduser()
        try:
            text = path.read_text()
        except OSError as err:
            raise ValueError(f"{KEY_FILE_ENV}: cannot read {path}: {err.strerror or err}") from None
        return _parse_key(text, KEY_FILE_ENV)
    return None


class Sealer:
    """Seals and opens byte strings under one key; `open` raises KeyMismatchError naming the key ids."""

    def __init__(self, key: bytes) -> None:
        self.aead = AESGCM(key)
        self.key_id = key_id(key)
        self._name_key = hashlib.sha256(b"iris blob names\0" + key).digest()

    def seal(self, data: bytes, context: str) -> bytes:
        """`data` encrypted, bound to `context` (the blob's key) so it opens only there."""
        nonce = os.urandom(NONCE_BYTES)
        return MAGIC + self.key_id.encode() + nonce + self.aead.encrypt(nonce, data, context.encode())

    def open(self, sealed: bytes, context: str, what: str) -> bytes:
        """The plaintext of a sealed `sealed`; KeyMismatchError (naming `what`) if it is not ours or not sealed."""
        written_with = sealed_key_id(sealed)
        if written_with != self.key_id:
            raise KeyMismatchError(mismatch_message(what, written_with, self.key_id))
        start = len(MAGIC) + _KEY_ID_CHARS
        nonce, body = sealed[start : start + NONCE_BYTES], sealed[start + NONCE_BYTES :]
        try:
            return self.aead.decrypt(nonce, body, context.encode())
        except InvalidTag:
            raise KeyMismatchError(f"{what} encrypted with key {self.key_id} does not decrypt: "
                              "it was altered, or moved from another place in the store") from None


    def private_name(self, name: str) -> str:
        """`name` with its digest part (the text between the last `/` and the first `.` after it) keyed.

        `bundles/<sha256>.zip` becomes `bundles/<hmac-sha256(key, sha256)>.zip`.
        """
        head, _, tail = name.rpartition("/")
        digest, dot, rest = tail.partition(".")
        keyed = hmac.new(self._name_key, digest.encode(), hashlib.sha256).hexdigest()
        return f"{head}/{keyed}{dot}{rest}" if head else f"{keyed}{dot}{rest}"


def sealed_key_id(data: bytes) -> str | None:
    """The key id a sealed blob names; None for data that is not sealed."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _KEY_ID_CHARS + NONCE_BYTES:
        return None
    return data[len(MAGIC) : len(MAGIC) + _KEY_ID_CHARS].decode("ascii", "replace")
