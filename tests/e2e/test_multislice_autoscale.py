"""The autoscaler grows the slices a pending multi-slice job needs, on the local platform, and the job runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from tests.support import Cluster

FLEET = {
    "autoscaler": {"scan_interval": "1s"},
    "scale_groups": [
        {
            "name": "pair", "platform": "local", "hosts_per_slice": 2, "max_slices": 2,
            "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "pair"}, "scale_down_delay": "2s",
        },
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    local = LocalCluster(tmp_path_factory.mktemp("iris-multislice-fleet"))
    info = local.up(parse_config(FLEET, "multi-slice fleet"))
    try:
        yield Cluster(local, info)
    finally:
        local.down()


def where() -> dict[str, str]:
    """A task's slice as Iris placed it and as MEGASCALE_* tells it."""
    return {key: os.environ.get(key, "") for key in ("IRIS_WORKER_ID", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID")}


def test_an_empty_group_grows_two_slices_for_a_two_slice_job(fleet: Cluster, tmp_path: Path) -> None:
    """A 2 x 2-host job on an empty group: two slices come up, tasks 0-1 on one and 2-3 on the other."""
    with IrisClient.connect(fleet.info.address, store=fleet.info.store_url) as client:
        job = client.submit(
            where,
            resources=ResourceSpec(cpu=0.5, memory="128m", replicas=4),
            constraints=[Constraint("pool", "EQ", "pair")],
            coscheduling=CoschedulingConfig("tpu-name", num_groups=2),
        )
        assert JobState.SUCCEEDED == job.wait(timeout=180).state
        results = job.results()
        slices = sorted({s.slice_id for s in client.list_slices(include_ended=True) if s.scale_group == "pair"})
    assert 2 == len(slices)
    expected = [
        {"IRIS_WORKER_ID": f"{slices[i // 2]}-{i % 2}", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": str(i // 2)}
        for i in range(4)
    ]
    assert expected == results
