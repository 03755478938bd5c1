"""Fixtures for the CoreWeave platform tests: a fake Kubernetes API server and a group pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.contracts.fleet import ScaleGroupSpec
from tests.platforms.k8s_fake import FakeKubernetes


@pytest.fixture
def fake_k8s() -> Iterator[FakeKubernetes]:
    fake = FakeKubernetes()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def coreweave_group(fake_k8s: FakeKubernetes, tmp_path: Path) -> Callable[..., ScaleGroupSpec]:
    """A factory of GPU scale groups whose `coreweave:` block points the real client at the fake."""
    kubeconfig = fake_k8s.write_kubeconfig(tmp_path / "kubeconfig")

    def make(name: str = "h100", **settings: Any) -> ScaleGroupSpec:
        return ScaleGroupSpec(
            name=name,
            platform="coreweave",
            hosts_per_slice=1,
            cpu_millis=96_000,
            memory_bytes=512 * 1024**3,
            gpus=8,
            attributes={"gpu-type": "h100"},
            runtime="containerd",
            settings={
                "namespace": "iris",
                "instance_type": "gd-8xh100ib-i128",
                "image": "iris-worker:test",
                "kubeconfig": str(kubeconfig),
                "poll_interval": 0.05,
                "rdma": 1,
                **settings,
            },
        )

    return make
