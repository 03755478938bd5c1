"""`iris autoscaler status`: each scale group's slices, demand, what it does now and why, its last decision."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import Constraint, IrisClient, ResourceSpec
from iris.client.views.autoscaler_view import explain_group
from iris.config.cluster_file import parse_config
from tests.ops.cli import iris
from tests.support import Cluster, running_cluster, wait_until
from workflows.fleet.autoscaler_state import GroupStatus

FLEET = {
    "autoscaler": {"scan_interval": "1s"},
    "scale_groups": [
        {"name": "cpu1", "platform": "local", "hosts_per_slice": 1, "max_slices": 1, "scale_down_delay": "10m",
         "resources": {"cpu": 1, "memory": "512m"}, "attributes": {"pool": "cpu1"}},
        {"name": "quota", "platform": "local", "hosts_per_slice": 2, "max_slices": 1,
         "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "quota"}, "local": {"max_hosts": 1}},
    ],
}  # fmt: skip
WHOLE_HOST = ResourceSpec(cpu=1, memory="256m")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("iris-autoscaler-status"), parse_config(FLEET, "test")) as cluster:
        yield cluster


def _group(text: str, name: str) -> str:
    """The lines of one group in `iris autoscaler status` output."""
    match = re.search(rf"^{name} \(.*?(?=^\S|\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, text
    return match.group(0)


def test_status_explains_scale_up_buffer_max_slices_and_backoff(fleet: Cluster) -> None:
    """A user sees the slice the autoscaler started and why, the idle one kept, a job held by max_slices,
    and a group backing off after a quota error, with the time it ends."""
    with IrisClient.connect(fleet.info.address, store=fleet.info.store_url) as client:
        first = client.submit_command(["true"], name="first", resources=WHOLE_HOST,
                                      constraints=[Constraint("pool", "EQ", "cpu1")])
        first.wait(timeout=120)

        def cpu1_status() -> str:
            status = iris(fleet, "autoscaler", "status")
            assert 0 == status.returncode, status.stderr
            return _group(status.stdout, "cpu1")

        # The autoscaler publishes its status on its own tick: the idle slice shows within a few seconds.
        wait_until(lambda: re.search(r"ready: cpu1-\w+ \(idle", cpu1_status()) is not None, timeout=30,
                   what="the idle slice in the status")  # fmt: skip
        group = cpu1_status()
        assert re.search(r"ready: cpu1-\w+ \(idle", group), group
        assert re.search(r"last decision at \d\d:\d\d:\d\d: scaled up: started cpu1-\w+ for pending work", group)
        assert "now: idle slice cpu1-" in group and "kept as buffer for scale_down_delay 600s" in group
        with urllib.request.urlopen(f"{fleet.info.dashboard_url}/fleet", timeout=30) as page:  # the same decision
            text = page.read().decode()
            assert re.search(r"scaled up: started cpu1-\w+ for pending work \(", text)
            assert "now: idle slice cpu1-" in text and "free to scale" not in text  # the same words as the CLI

        holder = client.submit_command(["sleep", "120"], name="holder", resources=WHOLE_HOST,
                                       constraints=[Constraint("pool", "EQ", "cpu1")])
        wait_until(lambda: holder.status().state == "RUNNING", timeout=60, what="holder runs")
        waiting = client.submit_command(["true"], name="waiting", resources=WHOLE_HOST,
                                        constraints=[Constraint("pool", "EQ", "cpu1")])
        quota = client.submit_command(["true"], name="quota", resources=ResourceSpec(cpu=0.5, memory="128m"),
                                      constraints=[Constraint("pool", "EQ", "quota")])

        def both_explained() -> str | None:
            text = iris(fleet, "autoscaler", "status").stdout
            held = "now: not scaling up: at max_slices (1)" in _group(text, "cpu1")
            backing = "now: backing off until" in _group(text, "quota")
            return text if held and backing else None

        text = wait_until(both_explained, timeout=60, interval=1.0, what="max_slices and back-off explained")
        assert "demand: 1 jobs wait for this group" in _group(text, "cpu1")
        quota_group = _group(text, "quota")
        assert re.search(r"backing off until \d\d:\d\d:\d\d after QuotaExhausted: ", quota_group), quota_group
        assert re.search(r"last decision at \d\d:\d\d:\d\d: backed off \d+s after QuotaExhausted", quota_group)
        for job in (holder, waiting, quota):
            client.terminate(job.job_id)


def test_wording_of_a_group_waiting_for_scale_up_delay_and_of_min_slices() -> None:
    """scale_up_delay and an idle slice kept for min_slices are said in words."""
    delayed = GroupStatus("g", "local", 0, 2, {"READY": ["g-1"]}, reason="scale_up_delay 60s: next scale-up in 12s")
    assert "now: waiting scale_up_delay (scale_up_delay 60s: next scale-up in 12s)" in explain_group(delayed, {}, 0.0)
    kept = GroupStatus("g", "local", 1, 2, {"READY": ["g-1"]}, idle_since={"g-1": 100.0}, scale_down_delay=30)
    assert "now: idle slice g-1 kept as buffer (min_slices 1)" in explain_group(kept, {}, 200.0)


def test_wording_of_an_idle_slice_kept_for_buffer_slices() -> None:
    """Past its scale_down_delay, an idle slice kept as the group's buffer says so."""
    kept = GroupStatus("g", "local", 0, 3, {"READY": ["g-1", "g-2"]}, idle_since={"g-2": 100.0},
                       scale_down_delay=30, buffer_slices=1)  # fmt: skip
    assert "now: idle slice g-2 kept as buffer (buffer_slices 1)" in explain_group(kept, {}, 200.0)


def test_the_zone_a_slice_went_to_and_why_is_said() -> None:
    """A multi-zone group's newest slice: the zone it was made in and the zones it passed, with their reasons."""
    where = "slice tpu-1 in us-east5-a (us-central2-b: RESOURCE_EXHAUSTED: stockout)"
    placed = GroupStatus("tpu", "gcp", 0, 2, {"READY": ["tpu-1"]}, last_placement=where)
    assert f"zones: {where}" in explain_group(placed, {}, 0.0)


def test_a_controller_started_without_a_config_leaves_the_scale_groups(fleet: Cluster, tmp_path: Path) -> None:
    """A second `iris controller serve` without `--config` (an operator's, a debugging one) took every scale
    group away from the running autoscaler ("no scale groups (the controller was started without any)"), and
    idle slices were then never scaled down; the groups stay."""
    log = tmp_path / "extra-controller.log"
    with log.open("w") as out:
        extra = subprocess.Popen(
            [sys.executable, "-m", "iris", "controller", "serve", "--temporal", fleet.info.address,
             "--store", fleet.info.store_url], env=fleet.env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_until(lambda: "controller_serving" in log.read_text(), timeout=60, what="the second controller serving")
        status = iris(fleet, "autoscaler", "status")
        assert 0 == status.returncode, status.stderr
        assert "no scale groups" not in status.stdout and "cpu1 (" in status.stdout, status.stdout
    finally:
        os.killpg(extra.pid, signal.SIGTERM)
        extra.wait(timeout=60)
