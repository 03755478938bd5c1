"""The session's real local cluster (Temporal dev server, controller, worker agents), shared by every suite.

The fleet: two plain CPU workers and one fake 4-host TPU slice (`slice-a`,
topology v5e-16, `tpu-worker-id` 0..3). Tests that need other workers start
them with `LocalCluster.start_worker` and stop them again. It starts on first
use, so suites that never ask for it never pay for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from iris import IrisClient
from iris.config import parse_config
from iris.local_cluster import LocalCluster
from tests.support import Cluster

TEST_FLEET = {
    "local": {
        "worker_groups": [
            {"name": "cpu", "count": 2, "resources": {"cpu": 2, "memory": "4g"}, "attributes": {"pool": "cpu"}},
            {
                "name": "slice-a",
                "count": 4,
                "resources": {"cpu": 1, "memory": "2g"},
                "attributes": {"tpu-name": "slice-a", "tpu-topology": "v5e-16"},
                "index_attribute": "tpu-worker-id",
            },
        ]
    }
}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("iris-home")
    local = LocalCluster(home)
    info = local.up(parse_config(TEST_FLEET, "test fleet"))
    try:
        yield Cluster(local, info)
    finally:
        local.down()


@pytest.fixture(scope="session")
def client(cluster: Cluster) -> Iterator[IrisClient]:
    with IrisClient.connect(cluster.info.address, store=cluster.info.store_url) as session_client:
        yield session_client
