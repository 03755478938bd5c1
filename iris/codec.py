"""Payload encryption: job inputs (argv, env, function keys) and results encrypted in Temporal's histories.

Whoever can read a namespace's histories (its operators, the Temporal UI) would otherwise read
every job's environment, secrets included. With a key set (`IRIS_CODEC_KEY`, base64 of 32 bytes,
or `IRIS_CODEC_KEY_FILE`), every Iris process encrypts the payloads it writes with AES-256-GCM and
decrypts what it reads; Temporal stores ciphertext. Search attributes (job state, name, user) stay
readable so the UI can still list and filter jobs. `iris codec-server` lets a key holder's Temporal
UI decode payloads in their own browser session: people without the key see ciphertext.

Every process of a deployment (clients, controllers, agents) needs the same key; a payload
written under another key fails to decode with an error naming the key ids.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

KEY_ENV = "IRIS_CODEC_KEY"
KEY_FILE_ENV = "IRIS_CODEC_KEY_FILE"
ENCODING = b"binary/encrypted"
_NONCE_BYTES = 12


def generate_key() -> str:
    """A fresh key as the text IRIS_CODEC_KEY takes."""
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


def _parse_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: the codec key must be base64 of 32 bytes (`iris codec-key` makes one)") from None
    if len(key) != 32:
        raise ValueError(f"{where}: the codec key must be 32 bytes (AES-256), got {len(key)}")
    return key


def load_key(environ: dict[str, str] | None = None) -> bytes | None:
    """The key from IRIS_CODEC_KEY or the file named by IRIS_CODEC_KEY_FILE; None when neither is set."""
    env = dict(os.environ) if environ is None else environ
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


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole serialized payloads; the key id travels in metadata, never the key."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(key).hexdigest()[:16]

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            sealed = self._aead.encrypt(nonce, payload.SerializeToString(), None)
            out.append(
                Payload(
                    metadata={"encoding": ENCODING, "encryption-key-id": self.key_id.encode()},
                    data=nonce + sealed,
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                out.append(payload)  # written before encryption was turned on: still readable
                continue
            key_id = payload.metadata.get("encryption-key-id", b"").decode()
            if key_id != self.key_id:
                raise ValueError(f"payload encrypted with key {key_id}, but this process holds key {self.key_id}")
            data = self._aead.decrypt(payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:], None)
            out.append(Payload.FromString(data))
        return out


def data_converter(key: bytes | None) -> DataConverter | None:
    """The default converter with encryption when there is a key; None (the SDK default) otherwise."""
    if key is None:
        return None
    return DataConverter(payload_codec=EncryptionCodec(key))
