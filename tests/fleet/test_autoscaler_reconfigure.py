"""A scale group backing off after its slices were refused starts afresh when its configuration changes."""

from __future__ import annotations

import asyncio

from activities.contracts.fleet import PLATFORM_REFUSED, ScaleGroupSpec
from tests.support import workflows_on_dev_server
from workflows.fleet.autoscaler_state import AutoscalerConfig, AutoscalerStatus, ScaleGroup
from workflows.fleet.autoscaler_workflow import AutoscalerWorkflow
from workflows.fleet.slice_lifecycle import SliceState
from workflows.fleet.slice_workflow import SliceUpdate


def _config(accelerator: str) -> AutoscalerConfig:
    spec = ScaleGroupSpec(name="tpu", platform="gcp", hosts_per_slice=1, cpu_millis=1000, memory_bytes=1 << 30,
                          settings={"accelerator_type": accelerator})  # fmt: skip
    return AutoscalerConfig(groups=[ScaleGroup(spec, max_slices=2)], scan_interval_seconds=3600)


async def _group(handle: object, want: str) -> AutoscalerStatus:
    for _ in range(100):
        status = await handle.query("status", result_type=AutoscalerStatus)  # type: ignore[attr-defined]
        if want in status.groups[0].last_decision:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"no decision {want!r}: {status.groups[0]}")


async def test_a_changed_group_config_clears_its_back_off() -> None:
    """Refused (a long back-off), the same config again keeps it; a changed one clears it, saying so."""
    async with workflows_on_dev_server("reconfigure", [AutoscalerWorkflow], []) as (client, queue):
        handle = await client.start_workflow(AutoscalerWorkflow.run, None, id=f"{queue}-as", task_queue=queue)
        try:
            await handle.signal("configure", _config("v9-bogus"))
            refused = SliceUpdate("tpu-1", "tpu", SliceState.FAILED, error="unknown accelerator type v9-bogus",
                                  error_type=PLATFORM_REFUSED)  # fmt: skip
            await handle.signal("slice_state", refused)
            backing_off = await _group(handle, "backed off")
            assert "refused by the platform" in backing_off.groups[0].backoff_reason
            await handle.signal("configure", _config("v9-bogus"))
            same = await handle.query("status", result_type=AutoscalerStatus)
            assert "refused by the platform" in same.groups[0].backoff_reason
            await handle.signal("configure", _config("v5litepod-16"))
            cleared = await _group(handle, "back-off cleared")
            assert "" == cleared.groups[0].backoff_reason
        finally:
            await handle.terminate("test done")
