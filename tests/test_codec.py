"""The codec key covers payloads and blobs alike: one line naming both key ids for a reader with another key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext

from iris.security.codec import (
    REASON_METADATA,
    EncryptionCodec,
    UnreadablePayload,
    data_converter,
    generate_key,
    load_key,
)
from iris.security.key_check import newest_evidence
from worker_agent.object_store import BlobKeyError, SealedBlobs, open_blob_store
from worker_agent.storage import BlobStore


def _key() -> bytes:
    key = load_key({"IRIS_CODEC_KEY": generate_key()})
    assert key is not None
    return key


KEY, OTHER = _key(), _key()
SECRET = b"s3cr3t-4711"


def _encode(key: bytes | None, value: object) -> Payload:
    converter = data_converter(key)
    [payload] = asyncio.run(converter.encode([value]))
    return payload


def _decode(key: bytes | None, payload: Payload, hint: type) -> object:
    [value] = asyncio.run(data_converter(key).decode([payload], [hint]))
    return value


def _ids() -> tuple[str, str]:
    return EncryptionCodec(KEY).key_id, EncryptionCodec(OTHER).key_id


def test_a_payload_round_trips_and_rests_as_ciphertext_naming_its_key() -> None:
    """Encrypted under the key, the payload holds no plaintext and names the key id; the key holder reads it."""
    payload = _encode(KEY, {"env": SECRET.decode()})
    assert SECRET not in payload.SerializeToString()
    assert _ids()[0].encode() == payload.metadata["encryption-key-id"]
    assert {"env": SECRET.decode()} == _decode(KEY, payload, dict)


@pytest.mark.parametrize("reader", ["other", "none"])
def test_another_key_or_none_gets_one_line_naming_both_ids(reader: str) -> None:
    """The codec never raises; the converter does, once, with the writer's and the reader's key ids."""
    payload = _encode(KEY, "value")
    with pytest.raises(UnreadablePayload) as caught:
        _decode(OTHER if reader == "other" else None, payload, str)
    mine, other = _ids()
    held = f"key {other}" if reader == "other" else "no key (set IRIS_CODEC_KEY or IRIS_CODEC_KEY_FILE)"
    assert f"payload encrypted with key {mine}, but this process holds {held}" == str(caught.value)


def test_the_codec_leaves_an_undecryptable_payload_encoded_with_its_reason() -> None:
    """What a workflow worker's codec does with a tampered payload: keeps it, marks it, raises nothing."""
    payload = _encode(KEY, "value")
    payload.data = payload.data[:-1] + bytes([payload.data[-1] ^ 1])
    [kept] = asyncio.run(EncryptionCodec(KEY).decode([payload]))
    assert payload.data == kept.data
    assert b"does not decrypt (altered)" in kept.metadata[REASON_METADATA]


def test_plaintext_payloads_written_before_the_key_stay_readable() -> None:
    """A payload written by a keyless process is read as it is (the codec's documented passthrough)."""
    assert "old" == _decode(KEY, _encode(None, "old"), str)


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore.from_url((tmp_path / "store").as_uri())


def test_sealed_blobs_rest_encrypted_and_read_back(store: BlobStore) -> None:
    """With a key, the store's file holds ciphertext; the key holder reads the plaintext."""
    sealed = open_blob_store(store.url, KEY)
    assert isinstance(sealed, SealedBlobs)
    sealed.put("jobs/j/function", SECRET)
    assert SECRET not in store.get("jobs/j/function")
    assert SECRET == sealed.get("jobs/j/function")
    assert store.url == sealed.url


def test_a_blob_under_another_key_or_none_is_refused_in_one_line(store: BlobStore) -> None:
    """Another key's blob, and a blob written without a key, are BlobKeyErrors naming the key ids."""
    open_blob_store(store.url, OTHER).put("jobs/j/result", b"x")
    store.put("jobs/j/plain", b"x")
    reader = open_blob_store(store.url, KEY)
    mine, other = _ids()
    with pytest.raises(BlobKeyError) as caught:
        reader.get("jobs/j/result")
    assert f"blob 'jobs/j/result' encrypted with key {other}, but this process holds key {mine}" == str(caught.value)
    with pytest.raises(BlobKeyError) as caught:
        reader.get("jobs/j/plain")
    assert "blob 'jobs/j/plain' not encrypted (written by a process without a key), but this process holds key" in str(
        caught.value
    )


def test_a_blob_moved_to_another_key_in_the_store_does_not_open(store: BlobStore) -> None:
    """Each blob is bound to its place: one job's result passed off as another's function is refused."""
    sealed = open_blob_store(store.url, KEY)
    sealed.put("jobs/a/result", b"data")
    store.put("jobs/b/function", store.get("jobs/a/result"))
    with pytest.raises(BlobKeyError, match="altered, or moved from another place"):
        sealed.get("jobs/b/function")


def test_an_encrypted_bundle_name_hides_its_digest_and_changes_with_the_key(store: BlobStore) -> None:
    """`bundles/<sha256>.zip` becomes a keyed name: same key, same name; another key, another name."""
    name = "bundles/" + "ab" * 32 + ".zip"
    mine = open_blob_store(store.url, KEY)
    assert isinstance(mine, SealedBlobs)
    other = open_blob_store(store.url, OTHER)
    assert isinstance(other, SealedBlobs)
    keyed = mine.content_key(name)
    assert (keyed.startswith("bundles/"), keyed.endswith(".zip")) == (True, True)
    assert "ab" * 32 not in keyed
    assert keyed == mine.content_key(name) != other.content_key(name)


def test_without_a_key_the_store_is_plain(store: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """No key in the environment: blobs are written as they are (the default reads the environment)."""
    monkeypatch.delenv("IRIS_CODEC_KEY", raising=False)
    monkeypatch.delenv("IRIS_CODEC_KEY_FILE", raising=False)
    open_blob_store(store.url).put("k", b"plain")
    assert b"plain" == store.get("k")


def _event(event_id: int, kind: str, payload: Payload, signal: str = "") -> HistoryEvent:
    event = HistoryEvent(event_id=event_id)
    if kind == "signal":
        event.workflow_execution_signaled_event_attributes.signal_name = signal
        event.workflow_execution_signaled_event_attributes.input.payloads.append(payload)
    elif kind == "activity":
        event.activity_task_scheduled_event_attributes.input.payloads.append(payload)
    else:
        event.workflow_execution_started_event_attributes.input.payloads.append(payload)
    return event


def test_the_newest_controller_written_payload_names_the_clusters_key() -> None:
    """Signals from anyone are not evidence; an activity's input or the start input (written by a controller) are."""
    mine, other = _ids()
    stray = _event(9, "signal", _encode(OTHER, "garbage"), "configure")
    activity = _event(8, "activity", _encode(KEY, "input"))
    old = _event(5, "activity", _encode(None, "old"))
    started = _event(1, "started", _encode(OTHER, None))
    found = newest_evidence([stray, activity, old, started])
    assert (mine, 8) == (found.key_id if found else None, found.event_id if found else None)
    found = newest_evidence([stray, old, started])
    assert (None, 5) == (found.key_id if found else "?", found.event_id if found else None)
    found = newest_evidence([stray, started])
    assert other == (found.key_id if found else None)
    assert newest_evidence([stray]) is None


def test_a_big_message_travels_binary_and_a_small_one_as_readable_json() -> None:
    """A protobuf message above LARGE_MESSAGE_BYTES is written binary (parsed in C, not field by field in Python);
    a small one stays JSON for the Temporal UI; both, and JSON written before, read back as the same message."""
    from google.protobuf import json_format

    from activities.proto import cluster_pb2 as pb
    from iris.security.codec import LARGE_MESSAGE_BYTES, IrisPayloadConverter

    converter = IrisPayloadConverter()
    small = pb.ClusterSummary(store_url="memory://x", healthy_workers=3)
    big = pb.WorkerList()
    while big.ByteSize() <= LARGE_MESSAGE_BYTES:
        big.workers.add(worker_id=f"w{len(big.workers):05d}", running_tasks=["job/task-0"])
    encoded = converter.to_payloads([small, big])
    assert [b"json/protobuf", b"binary/protobuf"] == [p.metadata["encoding"] for p in encoded]
    assert [small, big] == converter.from_payloads(encoded, [pb.ClusterSummary, pb.WorkerList])
    older = Payload(metadata={"encoding": b"json/protobuf", "messageType": b"iris.cluster.WorkerList"},
                    data=json_format.MessageToJson(big).encode())  # fmt: skip
    assert [big] == converter.from_payloads([older], [pb.WorkerList])


@pytest.mark.parametrize("key", [None, "key"], ids=["plaintext", "encrypted"])
def test_the_converter_converts_alike_in_every_context(key: str | None) -> None:
    """A controller's runner gives every payload its run's own context instead of asking the sandbox which
    command it belongs to (iris/controller/runner_wrapper.py): right only while no part of Iris's converter
    reads a context (the SDK's `with_context` then returns the converter itself) and nothing is stored
    externally. A context-aware codec or converter fails here first."""
    converter = data_converter(_key() if key else None)
    activity = ActivitySerializationContext(
        namespace="default", workflow_id="iris-job-a", workflow_type="JobWorkflow", activity_type="deliver_signals",
        activity_task_queue="iris-control", activity_id="1", is_local=False,
    )  # fmt: skip
    contexts = [WorkflowSerializationContext(namespace="default", workflow_id="iris-job-a"), activity]
    assert all(converter.with_context(c) is converter for c in contexts)
    assert converter.external_storage is None
