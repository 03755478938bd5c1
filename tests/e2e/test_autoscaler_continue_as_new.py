"""The autoscaler across continue-as-new: with a new run suggested every 20 history events, slices
created by one run are tracked, used and scaled down by later runs, and every run replays."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
from temporalio.client import Client

from activities.contracts import AUTOSCALER_WORKFLOW_ID
from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec
from iris.config.cluster_file import parse_config
from iris.controller.control_plane import controller_replayer
from iris.local.cluster import LocalCluster
from tests.e2e.test_fleet import slice_hosts
from tests.support import Cluster, replay, wait_until

FLEET = {
    "autoscaler": {"scan_interval": "1s"},  # the default 5 s only makes the test wait
    "scale_groups": [
        {
            "name": "pair", "platform": "local", "hosts_per_slice": 2, "max_slices": 1,
            "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "pair"},
            "scale_down_delay": "1s",  # a run lasts ~1.5 s: a slice's ~5 s from creation to scale-down spans several
        },
    ]
}  # fmt: skip
GANG = {
    "resources": ResourceSpec(cpu=0.5, memory="128m", replicas=2),
    "constraints": [Constraint("pool", "EQ", "pair")],
    "coscheduling": CoschedulingConfig("tpu-name"),
}


@pytest.fixture(scope="module")
def small_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("iris-autoscaler-can")
    local = LocalCluster(home)
    info = local.up(
        parse_config(FLEET, "test config"), dynamic_config={"limit.historyCount.suggestContinueAsNew": "20"}
    )
    try:
        yield Cluster(local, info)
    finally:
        local.down()
        for procs in slice_hosts(home).values():
            for p in procs:
                p.kill()


async def _autoscaler_runs(address: str) -> list[int]:
    """History length of every autoscaler run, newest first, after replaying each against today's code.

    The runs are found by walking the continue-as-new chain back from the current run (each run's
    first event names the run before it), not through visibility: every call has a deadline, so a
    server that stops answering fails the test in seconds instead of hanging it.
    """
    client = await Client.connect(address)
    replayer = controller_replayer()
    deadline = timedelta(seconds=30)
    run_id = (await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).describe(rpc_timeout=deadline)).run_id
    lengths = []
    while run_id:
        handle = client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID, run_id=run_id)
        history = await handle.fetch_history(rpc_timeout=deadline)
        result = await asyncio.wait_for(replay(replayer, history), 60)
        assert result is None or result.replay_failure is None, f"run {run_id}: {result.replay_failure}"
        lengths.append(len(history.events))
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    return lengths


def test_slices_outlive_autoscaler_runs(small_history: Cluster) -> None:
    client = IrisClient.connect(small_history.info.address, store=small_history.info.store_url)
    home = small_history.local.home
    for round_ in range(2):  # the second slice is made by a later run than the first's scale-down
        job = client.submit_command([sys.executable, "-c", "import time; time.sleep(1)"], **GANG)  # type: ignore[arg-type]
        assert JobState.SUCCEEDED == job.wait(timeout=180).state, f"round {round_}"
        (slice_id,) = {t.worker_id.rsplit("-", 1)[0] for t in job.status().tasks}
        wait_until(lambda s=slice_id: s not in slice_hosts(home), timeout=120, what=f"slice of round {round_} gone")
    runs = asyncio.run(_autoscaler_runs(small_history.info.address))
    assert len(runs) > 3, runs  # it continued as new many times meanwhile
    assert all(n < 200 for n in runs), runs  # each run stayed small
    assert [] == [s for s in client.list_slices() if s.state.value not in ("TERMINATED", "FAILED")]
