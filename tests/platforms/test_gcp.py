"""GcpPlatform through the real google-cloud-tpu client against a fake TPU gRPC service on loopback."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.cloud import tpu_v2

from activities.contracts.fleet import PlatformState, ScaleGroupSpec, slice_labels
from activities.platforms.base import PlatformRefused, QuotaExhausted, SliceFailed
from activities.platforms.gcp import NODE_ID_MAX, GcpPlatform, zonal_node_id
from activities.platforms.manual import ManualPlatform
from iris.config.cluster_file import parse_config
from iris.controller.control_plane import scale_group
from tests.platforms.tpu_fake import FakeTpu

PARENT = "projects/proj/locations/us-central2-b"


@pytest.fixture
def fake_tpu() -> Iterator[FakeTpu]:
    fake = FakeTpu().start()
    try:
        yield fake
    finally:
        fake.stop()


def gcp_group(fake: FakeTpu, name: str = "tpu-v5e-16", hosts: int = 4, **settings: Any) -> ScaleGroupSpec:
    block = {
        "project": "proj",
        "zone": "us-central2-b",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
        "spot": True,
        "network": "iris-net",
        "service_account": "iris@proj.iam.gserviceaccount.com",
        "api_endpoint": fake.endpoint,
        **settings,
    }
    block = {k: v for k, v in block.items() if v is not None}
    return ScaleGroupSpec(
        name=name, platform="gcp", hosts_per_slice=hosts, cpu_millis=1000, memory_bytes=1 << 30, settings=block
    )


async def test_create_describe_list_delete(fake_tpu: FakeTpu) -> None:
    """create makes one labelled node and waits for its operation; describe gives the VMs in worker order;
    a second create finds the node; list finds it by label; terminate deletes it."""
    group = gcp_group(fake_tpu)
    platform = GcpPlatform(group)
    info = await platform.create_slice("tpu-v5e-16-abc", group)
    assert (PlatformState.READY, 4) == (info.state, len(info.hosts))
    assert [(i, f"tpu-v5e-16-abc-{i}", "127.0.0.1") for i in range(4)] == [
        (h.index, h.worker_id, h.address) for h in info.hosts
    ]
    create = [r for m, r in fake_tpu.requests if m == "CreateNode"]
    assert 1 == len(create)
    assert (PARENT, "tpu-v5e-16-abc") == (create[0].parent, create[0].node_id)
    node = create[0].node
    assert {**slice_labels("tpu-v5e-16", "tpu-v5e-16-abc"), "iris-capacity": "spot"} == dict(node.labels)
    assert ("v5litepod-16", "v2-alpha-tpuv5-lite", True, "iris-net", "iris@proj.iam.gserviceaccount.com") == (
        node.accelerator_type,
        node.runtime_version,
        node.scheduling_config.spot,
        node.network_config.network,
        node.service_account.email,
    )
    assert "GetOperation" in fake_tpu.methods()  # the client polled the create operation to its end

    before = len(fake_tpu.requests)
    again = await GcpPlatform(group).create_slice("tpu-v5e-16-abc", group)  # a retry, or a restarted controller
    assert info.hosts == again.hosts
    assert ["GetNode"] == fake_tpu.methods()[before:]  # found by name: no second node

    other = gcp_group(fake_tpu, name="other")
    await GcpPlatform(other).create_slice("other-1", other)
    found = await GcpPlatform(group).list_slices({"iris-scale-group": "tpu-v5e-16"})
    assert ["tpu-v5e-16-abc"] == [s.slice_id for s in found]
    assert {"tpu-v5e-16-abc", "other-1"} == {s.slice_id for s in await platform.list_slices({})}
    assert PARENT == next(r for m, r in fake_tpu.requests if m == "ListNodes").parent

    await platform.terminate("tpu-v5e-16-abc")
    assert f"{PARENT}/nodes/tpu-v5e-16-abc" == next(r for m, r in fake_tpu.requests if m == "DeleteNode").name
    assert await platform.describe("tpu-v5e-16-abc") is None
    await platform.terminate("tpu-v5e-16-abc")  # already gone: fine
    assert 1 == fake_tpu.methods().count("DeleteNode")
    await platform.terminate("other-1")


async def test_stockout_is_quota_exhausted(fake_tpu: FakeTpu) -> None:
    """A create operation failing with RESOURCE_EXHAUSTED (code 8) is QuotaExhausted, and no node is left."""
    group = gcp_group(fake_tpu)
    fake_tpu.fail_next_create = (8, "There is no more capacity in the zone us-central2-b")
    with pytest.raises(QuotaExhausted, match="no more capacity"):
        await GcpPlatform(group).create_slice("tpu-v5e-16-q", group)
    assert {} == fake_tpu.nodes
    assert await GcpPlatform(group).describe("tpu-v5e-16-q") is None


async def test_quota_words_in_another_code_are_quota(fake_tpu: FakeTpu) -> None:
    """Quota refusals that arrive under another status (e.g. FAILED_PRECONDITION) are still QuotaExhausted."""
    group = gcp_group(fake_tpu)
    fake_tpu.fail_next_create = (9, "Quota 'TPUV5sLitepodPerProjectPerZoneForTPUAPI' exhausted. Limit 16")
    with pytest.raises(QuotaExhausted, match="Quota 'TPUV5s"):
        await GcpPlatform(group).create_slice("tpu-v5e-16-q2", group)


async def test_permanent_refusals_are_platform_refused(fake_tpu: FakeTpu) -> None:
    """403 on a call, INVALID_ARGUMENT for an unknown accelerator type, and an operation that ends with
    PERMISSION_DENIED are PlatformRefused, named by status; an INTERNAL operation error is a failed slice."""
    group = gcp_group(fake_tpu)
    fake_tpu.refusals["GetNode"] = (grpc.StatusCode.PERMISSION_DENIED, "Permission 'tpu.nodes.get' denied")
    with pytest.raises(PlatformRefused, match=r"get_node in projects/proj/.* refused: PERMISSION_DENIED: .*tpu\.nodes"):
        await GcpPlatform(group).create_slice("tpu-v5e-16-r1", group)
    assert [] == [m for m in fake_tpu.methods() if m == "CreateNode"]  # refused before anything was asked
    del fake_tpu.refusals["GetNode"]

    unknown = gcp_group(fake_tpu, hosts=1, accelerator_type="v9x-8")
    with pytest.raises(PlatformRefused, match=r"INVALID_ARGUMENT: Accelerator type 'v9x-8' is not available"):
        await GcpPlatform(unknown).create_slice("tpu-v9x-8-r2", unknown)

    fake_tpu.fail_next_create = (7, "The caller does not have permission to use service account iris@")
    with pytest.raises(PlatformRefused, match=r"node tpu-v5e-16-r3 .*: PERMISSION_DENIED: The caller"):
        await GcpPlatform(group).create_slice("tpu-v5e-16-r3", group)
    fake_tpu.fail_next_create = (13, "internal error")
    with pytest.raises(SliceFailed, match="INTERNAL: internal error"):
        await GcpPlatform(group).create_slice("tpu-v5e-16-r4", group)
    assert {} == fake_tpu.nodes


async def test_preempted_node_is_described_preempted(fake_tpu: FakeTpu) -> None:
    """A READY spot node that the cloud preempts (or terminates) is PREEMPTED in describe."""
    group = gcp_group(fake_tpu)
    platform = GcpPlatform(group)
    await platform.create_slice("tpu-v5e-16-p", group)
    for state in (tpu_v2.Node.State.PREEMPTED, tpu_v2.Node.State.TERMINATED):
        fake_tpu.set_state(f"{PARENT}/nodes/tpu-v5e-16-p", state)
        info = await platform.describe("tpu-v5e-16-p")
        assert info is not None and (PlatformState.PREEMPTED, f"node {state.name.lower()}") == (info.state, info.error)
    await platform.terminate("tpu-v5e-16-p")
    assert await platform.describe("tpu-v5e-16-p") is None


async def test_vm_count_comes_from_the_node(fake_tpu: FakeTpu) -> None:
    """For a type Iris's table does not know, the node's network endpoints are the VM count: a READY node with
    another count than hosts_per_slice is FAILED, saying why."""
    group = gcp_group(fake_tpu, hosts=4, accelerator_type="v9x-16")
    platform = GcpPlatform(group)  # unknown to the table: no check at start
    fake_tpu.vms_per_node = 2
    info = await platform.create_slice("tpu-v9x-16-a", group)
    assert (PlatformState.FAILED, "node has 2 VMs, the group's hosts_per_slice is 4") == (info.state, info.error)
    await platform.terminate("tpu-v9x-16-a")


def test_settings_and_vm_count_are_checked(fake_tpu: FakeTpu) -> None:
    """hosts_per_slice must match the accelerator type's VM count; unknown keys are refused."""
    with pytest.raises(ValueError, match=r"hosts_per_slice must be 4 for gcp\.accelerator_type v5litepod-16"):
        GcpPlatform(gcp_group(fake_tpu, hosts=2))
    with pytest.raises(ValueError, match="zonez"):
        GcpPlatform(gcp_group(fake_tpu, zonez="x"))


def test_readme_config_is_valid() -> None:
    """The README's manual and gcp scale groups load and pass both platforms' checks as written."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## Hosts over SSH and Cloud TPU") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    config = parse_config(yaml.safe_load(block[1]), "README")
    groups = {g.name: scale_group(g).spec for g in config.scale_groups}
    assert ["10.0.0.5", "10.0.0.6:2222"] == ManualPlatform(groups["ssh-pool"]).settings.hosts
    assert "us-central2-b" == GcpPlatform(groups["tpu-v5e-32"]).settings.zone


class Clock:
    """A clock the test moves (zone back-offs are judged by it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


ZONES = ["us-central2-b", "us-east5-a"]
STOCKOUT = (8, "There is no more capacity in the zone us-central2-b")


def creates_in(fake: FakeTpu, zone: str) -> int:
    return sum(1 for m, r in fake.requests if m == "CreateNode" and r.parent.endswith(f"/{zone}"))


async def test_a_stocked_out_zone_is_skipped_for_its_backoff(fake_tpu: FakeTpu) -> None:
    """Two zones, RESOURCE_EXHAUSTED in the first: the slice is made in the second, nothing is left in the
    first, its zone is named (slice label, worker attribute); the next slice does not ask the first zone
    again until its back-off (doubled after a second stockout) has passed, and uses it once it has capacity."""
    clock = Clock()
    group = gcp_group(fake_tpu, zone=None, zones=ZONES, zone_backoff=300)
    fake_tpu.create_errors["us-central2-b"] = STOCKOUT
    platform = GcpPlatform(group, clock=clock)
    info = await platform.create_slice("tpu-a", group)
    assert (PlatformState.READY, "us-east5-a") == (info.state, info.labels["zone"])
    assert info.placement.startswith("in us-east5-a (us-central2-b: ") and "no more capacity" in info.placement
    # nothing left in the first; the node's id names its zone
    assert ["projects/proj/locations/us-east5-a/nodes/tpu-a-us-east5-a"] == list(fake_tpu.nodes)
    assert (1, 1) == (creates_in(fake_tpu, "us-central2-b"), creates_in(fake_tpu, "us-east5-a"))
    described = await GcpPlatform(group, clock=clock).describe("tpu-a")  # found in its zone by a new object too
    assert described is not None and "us-east5-a" == described.labels["zone"]

    b = await platform.create_slice("tpu-b", group)  # within the back-off: the first zone is not asked
    assert b.placement.startswith("in us-east5-a (us-central2-b skipped for 300 s more ("), b.placement
    assert (1, 2) == (creates_in(fake_tpu, "us-central2-b"), creates_in(fake_tpu, "us-east5-a"))
    clock.now += 301
    await platform.create_slice("tpu-c", group)  # asked again, still out: skipped now for 600 s
    assert (2, 3) == (creates_in(fake_tpu, "us-central2-b"), creates_in(fake_tpu, "us-east5-a"))
    del fake_tpu.create_errors["us-central2-b"]
    clock.now += 599
    await platform.create_slice("tpu-d", group)
    assert 2 == creates_in(fake_tpu, "us-central2-b")
    clock.now += 2
    e = await platform.create_slice("tpu-e", group)
    assert "us-central2-b" == e.labels["zone"]
    assert {s.slice_id: s.labels["zone"] for s in await platform.list_slices({})} == {
        "tpu-a": "us-east5-a", "tpu-b": "us-east5-a", "tpu-c": "us-east5-a", "tpu-d": "us-east5-a",
        "tpu-e": "us-central2-b"}  # fmt: skip
    for slice_id in "abcde":
        await platform.terminate(f"tpu-{slice_id}")
    assert {} == fake_tpu.nodes


async def test_every_zone_stocked_out_is_quota_naming_each(fake_tpu: FakeTpu) -> None:
    """No zone with capacity: QuotaExhausted says why for each zone, and while both back off nothing is asked."""
    clock = Clock()
    group = gcp_group(fake_tpu, zone=None, zones=ZONES)
    for zone in ZONES:
        fake_tpu.create_errors[zone] = (8, f"no capacity in {zone}")
    platform = GcpPlatform(group, clock=clock)
    with pytest.raises(QuotaExhausted, match=r"no zone has v5litepod-16 capacity: .*in us-central2-b.*in us-east5-a"):
        await platform.create_slice("tpu-x", group)
    before = len(fake_tpu.requests)
    with pytest.raises(QuotaExhausted, match=r"us-central2-b skipped for 300 s more .*us-east5-a skipped for 300 s"):
        await platform.create_slice("tpu-y", group)
    assert [] == [m for m, _ in fake_tpu.requests[before:] if m == "CreateNode"]
    assert {} == fake_tpu.nodes


def test_a_zonal_node_id_is_valid_and_keeps_the_slice_ids_end() -> None:
    """A long group name loses its middle, never the slice id's unique end or the zone; 63 characters at most."""
    assert "tpu-a-us-east5-a" == zonal_node_id("tpu-a", "us-east5-a")
    slice_id = "a-very-long-scale-group-name-for-tpu-v5litepod-256-x-caf19bae"
    long = zonal_node_id(slice_id, "northamerica-northeast1-a")
    assert len(long) == NODE_ID_MAX and long.endswith("-caf19bae-northamerica-northeast1-a"), long
    assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", long)


def test_zone_or_zones(fake_tpu: FakeTpu) -> None:
    """A gcp block names `zone` or `zones`, not both and not neither; zones are distinct."""
    with pytest.raises(ValueError, match="not both"):
        GcpPlatform(gcp_group(fake_tpu, zones=ZONES))
    with pytest.raises(ValueError, match="`zone` or `zones` is required"):
        GcpPlatform(gcp_group(fake_tpu, zone=None))
    with pytest.raises(ValueError, match="distinct"):
        GcpPlatform(gcp_group(fake_tpu, zone=None, zones=["a", "a"]))
    assert ZONES == GcpPlatform(gcp_group(fake_tpu, zone=None, zones=ZONES)).settings.zone_list


async def test_a_zone_that_does_not_offer_the_type_is_skipped(fake_tpu: FakeTpu) -> None:
    """A type one zone does not offer (INVALID_ARGUMENT there) is created in the next; offered nowhere, it is a
    refusal (PlatformRefused) naming every zone, not a stockout."""
    clock = Clock()
    group = gcp_group(fake_tpu, zone=None, zones=ZONES)
    fake_tpu.offered["us-central2-b"] = {"v4-8"}
    platform = GcpPlatform(group, clock=clock)
    info = await platform.create_slice("tpu-o", group)
    assert "us-east5-a" == info.labels["zone"]
    await platform.terminate("tpu-o")
    clock.now += 10_000
    fake_tpu.offered["us-east5-a"] = {"v4-8"}
    with pytest.raises(PlatformRefused, match=r"every zone refused: .*us-central2-b.*us-east5-a"):
        await platform.create_slice("tpu-p", group)
    assert {} == fake_tpu.nodes


async def test_a_changed_gcp_block_asks_a_stocked_out_zone_again(fake_tpu: FakeTpu) -> None:
    """The back-off of a stocked-out zone is per configuration: after a config change, the zone is asked at once."""
    clock = Clock()
    group = gcp_group(fake_tpu, zone=None, zones=ZONES, zone_backoff=300)
    fake_tpu.create_errors["us-central2-b"] = STOCKOUT
    await GcpPlatform(group, clock=clock).create_slice("tpu-f", group)
    del fake_tpu.create_errors["us-central2-b"]
    await GcpPlatform(group, clock=clock).create_slice("tpu-g", group)  # same config: still skipped
    assert 1 == creates_in(fake_tpu, "us-central2-b")
    changed = gcp_group(fake_tpu, zone=None, zones=ZONES, zone_backoff=300, runtime_version="v2-alpha-tpuv5")
    h = await GcpPlatform(changed, clock=clock).create_slice("tpu-h", changed)
    assert ("us-central2-b", "in us-central2-b") == (h.labels["zone"], h.placement)
    for slice_id in "fgh":
        await GcpPlatform(group, clock=clock).terminate(f"tpu-{slice_id}")
