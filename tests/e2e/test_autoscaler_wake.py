"""The autoscaler does not poll an idle cluster: the scheduler wakes it when a job cannot be placed.

An idle autoscaler (no slice, nothing queued) adds nothing to its history; a job that needs a new slice
still gets one at once (the autoscaler's own timer is minutes long then: only the scheduler's `wake`
can have started it), and the slice is scaled down when the job is done.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.contracts import AUTOSCALER_WORKFLOW_ID, WAKE_AUTOSCALER
from iris import Constraint, IrisClient, JobState, ResourceSpec
from iris.config import parse_config
from tests.e2e.test_fleet import slice_hosts
from tests.support import Cluster, running_cluster, wait_until

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


async def _history(address: str) -> tuple[int, list[str]]:
    """The autoscaler's current run: its length and the names of the signals it got."""
    client = await Client.connect(address)
    history = await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).fetch_history()
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in history.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]  # fmt: skip
    return len(history.events), signals


def test_an_idle_autoscaler_writes_nothing_and_is_woken_by_a_job_it_must_place(woken: Cluster) -> None:
    address = woken.info.address
    def settled() -> int | None:  # its start (orphan cleanup, a first plan) is over
        length, _ = asyncio.run(_history(address))
        time.sleep(1)
        return length if length == asyncio.run(_history(address))[0] else None

    before = wait_until(settled, timeout=60, what="the autoscaler settled")
    time.sleep(12)  # more than two scan intervals, which used to add a plan each
    idle, signals = asyncio.run(_history(address))
    assert before == idle, f"an idle autoscaler's history grew from {before} to {idle} events"
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
