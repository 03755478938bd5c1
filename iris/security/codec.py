"""Payload encryption: job inputs (argv, env, function keys), results and failures encrypted in Temporal's histories.

Whoever can read a namespace's histories (its operators, the Temporal UI) would otherwise read
every job's environment, secrets included. With a key set (`IRIS_CODEC_KEY`, base64 of 32 bytes,
or `IRIS_CODEC_KEY_FILE`), every Iris process encrypts the payloads it writes with AES-256-GCM and
decrypts what it reads; Temporal stores ciphertext. Failure messages and stack traces are encoded
too. Search attributes (job state, name, user), workflow ids and task queue names stay readable so
the UI can still list and filter jobs. `iris codec-server` lets a key holder's Temporal UI decode
payloads in their own browser session: people without the key see ciphertext.

A payload this process cannot decrypt (another key, tampered, or encrypted while this process
holds no key) is never an error of the codec: the codec leaves it encoded, with the reason beside
it, and the payload converter raises `UnreadablePayload` with that reason (one line naming both
key ids) only where the value is converted. A workflow worker decodes every payload of an
activation before the workflow sees any; a codec that raised there would fail the workflow task
for good and wedge a long-lived workflow behind one bad signal. Left encoded, the SDK drops the
one signal whose arguments do not convert (see `iris.controller.payload_guard`), and everything else goes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    BinaryProtoPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadCodec,
)

from activities.contracts import UnreadablePayload
from activities.contracts.dataclass_json import UnplainError, plan_for, to_plain
from worker_agent.encryption import (
    KEY_ENV,
    KEY_FILE_ENV,
    NONCE_BYTES,
    Sealer,
    generate_key,
    key_id,
    load_key,
    mismatch_message,
)

__all__ = [
    "ENCODING",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "EncryptionCodec",
    "IrisPayloadConverter",
    "UnreadablePayload",
    "data_converter",
    "generate_key",
    "key_id",
    "load_key",
    "payload_key_id",
]

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
REASON_METADATA = "iris-unreadable"
"""Set (in memory only) on a payload the codec could not decrypt: why, in one line."""


def payload_key_id(payload: Payload) -> str | None:
    """The key id an encrypted payload names; None for a plaintext payload."""
    if payload.metadata.get("encoding") != ENCODING:
        return None
    return payload.metadata.get(KEY_ID_METADATA, b"").decode("ascii", "replace") or "(none)"


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole serialized payloads; the key id travels in metadata, never the key."""

    def __init__(self, key: bytes) -> None:
        self._sealer = Sealer(key)
        self.key_id = self._sealer.key_id

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = self._sealer.aead.encrypt(nonce, payload.SerializeToString(), None)
            out.append(
                Payload(metadata={"encoding": ENCODING, KEY_ID_METADATA: self.key_id.encode()}, data=nonce + sealed)
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decode_one(payload) for payload in payloads]

    def decode_one(self, payload: Payload) -> Payload:
        """The plaintext payload; an undecryptable one is returned as it is, its reason in its metadata."""
        written_with = payload_key_id(payload)
        if written_with is None:
            return payload  # written before encryption was turned on: still readable
        if written_with != self.key_id:
            return _unreadable(payload, mismatch_message("payload", written_with, self.key_id))
        nonce, body = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            return Payload.FromString(self._sealer.aead.decrypt(nonce, body, None))
        except (InvalidTag, ValueError):
            return _unreadable(payload, f"payload encrypted with key {self.key_id} does not decrypt (altered)")

    def decode_strict(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Like `decode`, but UnreadablePayload for the first payload that does not decrypt (the codec server)."""
        out = [self.decode_one(payload) for payload in payloads]
        for payload in out:
            if REASON_METADATA in payload.metadata:
                raise UnreadablePayload(payload.metadata[REASON_METADATA].decode())
        return out


def _unreadable(payload: Payload, reason: str) -> Payload:
    marked = Payload()
    marked.CopyFrom(payload)
    marked.metadata[REASON_METADATA] = reason.encode()
    return marked


class _EncryptedPayloadRefusal(EncodingPayloadConverter):
    """Knows `binary/encrypted` only to say, in one line, why such a payload cannot be read here."""

    @property
    def encoding(self) -> str:
        return ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None  # never chosen to write a value

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        reason = payload.metadata.get(REASON_METADATA)
        if reason is not None:
            raise UnreadablePayload(reason.decode())
        raise UnreadablePayload(mismatch_message("payload", payload_key_id(payload), None))


class _MessageJSONConverter(JSONPlainPayloadConverter):
    """The SDK's JSON converter, with Iris's messages encoded and decoded by activities.contracts.dataclass_json
    (the same bytes and values, without the SDK's per-value copies and type hints)."""

    def to_payload(self, value: Any) -> Payload | None:
        if type(value) in (list, tuple) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            try:
                plain = to_plain(value)
            except UnplainError:
                return super().to_payload(value)
            data = json.dumps(plain, separators=(",", ":"), sort_keys=True).encode()  # as the SDK's encoder writes
            return Payload(metadata={"encoding": self.encoding.encode()}, data=data)
        return super().to_payload(value)

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        plan = plan_for(type_hint) if type_hint is not None else None
        if plan is None:
            return super().from_payload(payload, type_hint)
        try:
            value = json.loads(payload.data)
        except json.JSONDecodeError as err:
            raise RuntimeError("Failed parsing") from err
        return plan(value)


LARGE_MESSAGE_BYTES = 8 * 1024
"""A protobuf message bigger than this travels as binary/protobuf; a smaller one as JSON (readable in the UI)."""


class _LargeMessageBinaryConverter(BinaryProtoPayloadConverter):
    """The SDK writes every protobuf message as JSON, which is written and parsed field by field in Python:
    a 256 KiB page of the `workers` query took 35 ms to write and 57 ms to read (1 ms and 0.5 ms binary), and a
    rebuilt scheduler's re-registrations 0.59 s of one workflow task. A message bigger than LARGE_MESSAGE_BYTES
    is written binary; a smaller one is left to the JSON converter after this one, so what the Temporal UI
    shows of small messages stays readable. Reading goes by each payload's encoding, so either is read."""

    def to_payload(self, value: Any) -> Payload | None:
        if isinstance(value, Message) and value.ByteSize() > LARGE_MESSAGE_BYTES:
            return super().to_payload(value)
        return None


class IrisPayloadConverter(CompositePayloadConverter):
    """The SDK's default converters (messages decoded by plan, big protobuf messages written binary), plus a
    one-line error for payloads this process cannot decrypt."""

    def __init__(self) -> None:
        converters: list[EncodingPayloadConverter] = []
        for c in DefaultPayloadConverter.default_encoding_payload_converters:
            if isinstance(c, JSONPlainPayloadConverter):
                converters.append(_MessageJSONConverter())
            elif isinstance(c, BinaryProtoPayloadConverter):
                continue  # one converter per encoding: the large-message one, before the JSON one, reads these
            else:
                if c.encoding == "json/protobuf":
                    converters.append(_LargeMessageBinaryConverter())
                converters.append(c)
        super().__init__(*converters, _EncryptedPayloadRefusal())


def data_converter(key: bytes | None) -> DataConverter:
    """Iris's converter: encryption (payloads and failure messages) with a key, plaintext without one.

    Either way a payload encrypted under a key this process lacks fails to convert with one line
    naming the key ids, never with the SDK's "Unknown payload encoding".
    """
    if key is None:
        return DataConverter(payload_converter_class=IrisPayloadConverter)
    return DataConverter(
        payload_converter_class=IrisPayloadConverter,
        payload_codec=EncryptionCodec(key),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
