"""A two-zone gcp group through the real autoscaler, against a fake TPU API that is stocked out in the
first zone: the slice is made in the second, `iris autoscaler status` says where and why, and nothing is
left in the first zone."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from iris.config.cluster_file import parse_config
from tests.ops.cli import iris
from tests.platforms.tpu_fake import FakeTpu
from tests.support import running_cluster, wait_until

ZONES = ["us-central2-b", "us-east5-a"]


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fake_tpu() -> Iterator[FakeTpu]:
    fake = FakeTpu().start()
    fake.create_errors[ZONES[0]] = (8, f"There is no more capacity in the zone {ZONES[0]}")
    try:
        yield fake
    finally:
        fake.stop()


def test_a_stocked_out_zone_is_passed_and_the_status_says_so(
    fake_tpu: FakeTpu, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # min_slices 1: the autoscaler makes a slice with no job waiting. Its hosts are not reachable over SSH
    # (nothing listens on the port): the zone decision is made and shown before the bootstrap.
    fleet = {"scale_groups": [{
        "name": "tpu", "platform": "gcp", "hosts_per_slice": 2, "min_slices": 1, "max_slices": 1,
        "resources": {"cpu": 1, "memory": "512m"},
        "gcp": {"project": "proj", "zones": ZONES, "accelerator_type": "v4-16", "runtime_version": "base",
                "api_endpoint": fake_tpu.endpoint, "ssh": {"user": "nobody", "port": _unused_port()}},
    }]}  # fmt: skip
    home = tmp_path_factory.mktemp("iris-zones")
    with running_cluster(home, parse_config(fleet, "test")) as cluster:

        def zone_line() -> str | None:
            status = iris(cluster, "autoscaler", "status")
            assert 0 == status.returncode, status.stderr
            found = re.search(r"zones: slice tpu-\w+ in .*", status.stdout)
            return found.group(0) if found else None

        line = wait_until(zone_line, timeout=120, interval=1.0, what="the zone decision in the status")
        assert line.startswith("zones: slice tpu-") and f" in {ZONES[1]} ({ZONES[0]}: " in line, line
        assert "no more capacity" in line, line
        assert [] == [name for name in fake_tpu.nodes if f"/locations/{ZONES[0]}/" in name]  # nothing left there
