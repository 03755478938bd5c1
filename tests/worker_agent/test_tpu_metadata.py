"""The agent's TPU facts from a GCE metadata server (a fake on loopback, found through $GCE_METADATA_HOST)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.platforms.tpu_fake import FakeMetadata, tpu_vm_attributes
from tests.sshd import free_port
from worker_agent.tpu_metadata import MetadataUnavailable, read_tpu_attributes, tpu_attributes_if_available


@pytest.fixture
def metadata(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMetadata]:
    server = FakeMetadata(tpu_vm_attributes("my-tpu", "v5litepod-32", "4x8", worker=3, vms=8))
    monkeypatch.setenv("GCE_METADATA_HOST", server.host)
    try:
        yield server
    finally:
        server.stop()


def test_reads_slice_facts(metadata: FakeMetadata) -> None:
    """tpu-name, tpu-worker-id, Iris's variant name, the API's type, chip topology and VM count, with the header."""
    expected = {"tpu-name": "my-tpu", "tpu-worker-id": 3, "tpu-topology": "v5e-32",
                "tpu-accelerator-type": "v5litepod-32", "tpu-chip-topology": "4x8", "tpu-vm-count": 8}
    assert expected == read_tpu_attributes()
    assert metadata.requests and all(flavor == "Google" for _, flavor in metadata.requests)


def test_not_a_tpu_vm(metadata: FakeMetadata, monkeypatch: pytest.MonkeyPatch) -> None:
    """A metadata server without accelerator-type is not a TPU VM: an error when required, nothing when auto."""
    metadata.attributes.clear()
    with pytest.raises(MetadataUnavailable, match="not a TPU VM"):
        tpu_attributes_if_available(True)
    assert {} == tpu_attributes_if_available(None)


def test_auto_only_with_gce_metadata_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without $GCE_METADATA_HOST nothing is asked (auto); with --tpu-vm a silent server is a clear error."""
    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    assert {} == tpu_attributes_if_available(None)
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{free_port()}")
    with pytest.raises(MetadataUnavailable, match=r"^metadata server 127\.0\.0\.1:\d+: .*refused"):
        tpu_attributes_if_available(True, timeout=2)
