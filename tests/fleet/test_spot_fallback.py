"""A `spot_then_on_demand` group that the cloud keeps taking back falls back to on-demand, and says so.

The real AutoscalerWorkflow and SliceWorkflows on a dev server, the real slice activities and GcpPlatform
against the TPU API fake; only the parts that need hosts are stand-ins (bootstrap and registration are
immediate, the plan asks for one slice whenever the group has none). The fake's nodes are preempted as
GCP does it (state PREEMPTED); after two, the next node is created on-demand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from google.cloud import tpu_v2
from temporalio import activity
from temporalio.client import WorkflowHandle

from activities.contracts import AUTOSCALER_WORKFLOW_ID
from activities.contracts.fleet import (
    AUTOSCALE_PLAN,
    CLEANUP_ORPHANS,
    KNOWN_SLICES,
    SLICE_BOOTSTRAP,
    SLICE_WAIT_REGISTERED,
    START_SLICE,
    ControlPlaneAddress,
    KnownSlice,
    OrphanCleanup,
    PlanInput,
    PlanResult,
    RegistrationWait,
    ScaleGroupSpec,
    SliceRequest,
)
from activities.contracts.fleet import StartSlice as StartSliceInput
from activities.slices import SliceActivities
from iris.client.views.autoscaler_view import explain_group
from iris.deploy.temporal_setup import ensure_search_attributes
from tests.platforms.tpu_fake import FakeTpu
from tests.support import workflows_on_dev_server
from workflows.fleet.autoscaler_state import AutoscalerConfig, AutoscalerStatus, ScaleGroup
from workflows.fleet.autoscaler_workflow import AutoscalerWorkflow
from workflows.fleet.slice_workflow import SliceWorkflow

GROUP = "spot-v4"


def group_spec(tpu: FakeTpu) -> ScaleGroupSpec:
    settings = {
        "project": "proj", "zone": "us-central2-b", "accelerator_type": "v4-8", "runtime_version": "tpu-vm-base",
        "api_endpoint": tpu.endpoint, "capacity": "spot_then_on_demand",
        "spot_fallback": {"after_preemptions": 2, "within": "1h", "hold": "2h"},
    }  # fmt: skip
    return ScaleGroupSpec(name=GROUP, platform="gcp", hosts_per_slice=1, cpu_millis=1000, memory_bytes=1 << 30,
                          settings=settings)  # fmt: skip


def stand_ins(queue: Callable[[], str]) -> list[Callable[..., Any]]:
    """The activities that would need hosts or a scheduler, as immediate stand-ins."""

    @activity.defn(name=AUTOSCALE_PLAN)
    async def plan(inp: PlanInput) -> PlanResult:
        live = [s for s in inp.slices if s.group == GROUP]
        return PlanResult(create={} if live else {GROUP: 1}, recheck_after=1.0)

    @activity.defn(name=START_SLICE)
    async def start_slice(req: StartSliceInput) -> None:
        await activity.client().start_workflow("SliceWorkflow", req.workflow_input, id=req.slice_id,
                                               task_queue=queue())  # fmt: skip

    @activity.defn(name=KNOWN_SLICES)
    async def known() -> list[KnownSlice]:
        return []

    @activity.defn(name=CLEANUP_ORPHANS)
    async def cleanup(req: OrphanCleanup) -> list[str]:
        return []

    @activity.defn(name=SLICE_BOOTSTRAP)
    async def bootstrap(req: SliceRequest) -> None:
        return None

    @activity.defn(name=SLICE_WAIT_REGISTERED)
    async def registered(req: RegistrationWait) -> None:
        return None

    return [plan, start_slice, known, cleanup, bootstrap, registered]


async def ready_node(tpu: FakeTpu, seen: set[str], timeout: float = 60.0) -> tpu_v2.Node:
    """The next READY node of the group that the test has not seen yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, node in list(tpu.nodes.items()):
            if name not in seen and node.state == tpu_v2.Node.State.READY:
                seen.add(name)
                return node
        await asyncio.sleep(0.1)
    raise AssertionError(f"no new READY node within {timeout} s: {tpu.nodes}")


async def status_of(handle: WorkflowHandle[Any, Any], want: Callable[[AutoscalerStatus], bool]) -> AutoscalerStatus:
    for _ in range(300):
        status = await handle.query("status", result_type=AutoscalerStatus)
        if status.groups and want(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"status never as wanted: {status}")


async def test_group_preempted_twice_falls_back_to_on_demand() -> None:
    """Two spot nodes PREEMPTED within the window: the third is created on-demand (the API request says so),
    and `iris autoscaler status` names each slice's capacity and why the group is on-demand now."""
    tpu = FakeTpu().start()
    queue_name = ""
    slices = SliceActivities(ControlPlaneAddress("127.0.0.1:1", "default", "file:///nonexistent"))
    real = [slices.create, slices.wait_ready, slices.watch, slices.terminate]
    try:
        async with workflows_on_dev_server(
            "spot", [AutoscalerWorkflow, SliceWorkflow], [*real, *stand_ins(lambda: queue_name)]
        ) as (client, queue):
            queue_name = queue
            await ensure_search_attributes(client, wait=30)  # SliceWorkflow publishes IrisSliceState
            handle = await client.start_workflow(AutoscalerWorkflow.run, None, id=AUTOSCALER_WORKFLOW_ID,
                                                 task_queue=queue)  # fmt: skip
            await handle.signal("configure", AutoscalerConfig(groups=[ScaleGroup(group_spec(tpu), max_slices=1)],
                                                              scan_interval_seconds=1.0))  # fmt: skip
            seen: set[str] = set()
            for _ in range(2):
                node = await ready_node(tpu, seen)
                assert node.scheduling_config.spot and "spot" == node.labels["iris-capacity"]
                await status_of(handle, lambda s: "spot" in s.groups[0].capacity.values())
                tpu.set_state(node.name, tpu_v2.Node.State.PREEMPTED)  # what the cloud does to a spot VM
            third = await ready_node(tpu, seen)
            assert not third.scheduling_config.spot and "on_demand" == third.labels["iris-capacity"]
            status = await status_of(handle, lambda s: "on_demand" in s.groups[0].capacity.values())
            group = status.groups[0]
            assert "2 spot slices preempted within 1h" == group.fallback_reason
            assert "spot_then_on_demand" == group.capacity_policy
            lines = explain_group(group, {}, time.time())
            capacity_line = next(line for line in lines if line.startswith("capacity:"))
            assert "new slices on-demand until" in capacity_line and "2 spot slices preempted" in capacity_line
            assert any("(on-demand" in line for line in lines), lines
            print("\n".join(lines))
            await handle.terminate("test done")
    finally:
        tpu.stop()


async def test_spot_stocked_out_everywhere_falls_back_at_once() -> None:
    """The spot create is refused for capacity (RESOURCE_EXHAUSTED): the group does not back off; its next
    slice is on-demand at once, and the status says spot is stocked out."""
    tpu = FakeTpu().start()
    tpu.fail_next_create = (8, "There is no more capacity in the zone: stockout")  # RESOURCE_EXHAUSTED
    queue_name = ""
    slices = SliceActivities(ControlPlaneAddress("127.0.0.1:1", "default", "file:///nonexistent"))
    real = [slices.create, slices.wait_ready, slices.watch, slices.terminate]
    try:
        async with workflows_on_dev_server(
            "stockout", [AutoscalerWorkflow, SliceWorkflow], [*real, *stand_ins(lambda: queue_name)]
        ) as (client, queue):
            queue_name = queue
            await ensure_search_attributes(client, wait=30)
            handle = await client.start_workflow(AutoscalerWorkflow.run, None, id=AUTOSCALER_WORKFLOW_ID,
                                                 task_queue=queue)  # fmt: skip
            await handle.signal("configure", AutoscalerConfig(groups=[ScaleGroup(group_spec(tpu), max_slices=1)],
                                                              scan_interval_seconds=1.0))  # fmt: skip
            node = await ready_node(tpu, set())
            assert not node.scheduling_config.spot and "on_demand" == node.labels["iris-capacity"]
            creates = [r for m, r in tpu.requests if m == "CreateNode"]
            assert [True, False] == [r.node.scheduling_config.spot for r in creates]
            group = (await status_of(handle, lambda s: bool(s.groups[0].fallback_reason))).groups[0]
            assert group.fallback_reason.startswith("spot stocked out in every zone: ")
            assert "" == group.backoff_reason
            await handle.terminate("test done")
    finally:
        tpu.stop()
