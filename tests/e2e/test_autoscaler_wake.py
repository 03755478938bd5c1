"""The autoscaler does not poll an idle cluster: the scheduler wakes it when a job cannot be placed.

An idle autoscaler (no slice, nothing queued) adds nothing to its history; a job that needs a new slice
still gets one at once (the autoscaler's own timer is minutes long then: only the scheduler's `wake`
can have started it), and the slice is scaled down when the job is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.contracts import AUTOSCALER_WORKFLOW_ID, WAKE_AUTOSCALER
from iris import Constraint, IrisClient, JobState, ResourceSpec
from iris.config.cluster_file import parse_config
from tests.e2e.test_fleet import slice_hosts
from tests.support import Cluster, armed_timers, running_cluster, wait_until
from workflows.fleet.autoscaler_pace import IDLE_TICK

FLEET = {
    "scale_groups": [
        {"name": "woken", "platform": "local", "hosts_per_slice": 1, "max_slices": 1, "scale_down_delay": "1s",
         "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "woken"}},
    ],
}  # fmt: skip (the default scan_interval: 5 s)


@pytest.fixture(scope="module")
def woken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("iris-autoscaler-wake")
    try:
        with running_cluster(home, parse_config(FLEET, "test config")) as cluster:
            yield cluster
    finally:
        for procs in slice_hosts(home).values():
            for p in procs:
                p.kill()


async def _history(address: str) -> tuple[list[float] | None, list[str]]:
    """The autoscaler's current run: the timers it has armed (None while a workflow task or an activity is
    in flight) and the names of the signals it got."""
    client = await Client.connect(address)
    history = await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).fetch_history()
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in history.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]  # fmt: skip
    return armed_timers(history), signals


def test_an_idle_autoscaler_writes_nothing_and_is_woken_by_a_job_it_must_place(woken: Cluster) -> None:
    """Once its start is over (orphan cleanup, a first plan), the idle autoscaler waits on one timer of
    IDLE_TICK, a backstop: not the 5 s scan interval it used to poll at. Read from its history, no sleep."""
    address = woken.info.address

    def waiting() -> list[float] | None:
        timers, _ = asyncio.run(_history(address))
        return timers if timers is not None and len(timers) == 1 else None

    (timer,) = wait_until(waiting, timeout=60, what="the autoscaler waiting on one timer")
    assert timer >= IDLE_TICK.total_seconds(), f"an idle autoscaler looks again in {timer} s"
    _, signals = asyncio.run(_history(address))
    assert WAKE_AUTOSCALER not in signals

    with IrisClient.connect(address, store=woken.info.store_url) as client:
        job = client.submit_command(["true"], resources=ResourceSpec(cpu=0.5, memory="128m"),
                                    constraints=[Constraint("pool", "EQ", "woken")])  # fmt: skip
        assert JobState.SUCCEEDED == job.wait(timeout=120).state
        _, signals = asyncio.run(_history(address))
        assert WAKE_AUTOSCALER in signals, signals
        # Scaled down when idle past its scale_down_delay: the autoscaler watches a slice with work.
        wait_until(lambda: not [s for s in client.list_slices() if s.state.value not in ("TERMINATED", "FAILED")],
                   timeout=60, what="the slice scaled down")  # fmt: skip
