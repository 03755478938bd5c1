"""Teams on a local cluster: a lender reclaims what another team borrowed, whole gangs, within the grace."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import CoschedulingConfig, IrisClient, JobState, ResourceSpec
from iris.config import parse_config
from tests.e2e.test_sharing import iris_cli, victim_script
from tests.support import Cluster, running_cluster, wait_until

GRACE = 3.0
FLEET = {
    "local": {
        "worker_groups": [  # two slices of two 4-core hosts: 16 cores, a gang of two fills a slice (8 cores)
            {
                "name": name,
                "count": 2,
                "resources": {"cpu": 4, "memory": "2g"},
                "attributes": {"tpu-name": name},
                "index_attribute": "tpu-worker-id",
            }
            for name in ("slice-a", "slice-b")
        ]
    },
    "sharing": {
        "preemption_grace": f"{GRACE:g}s",
        "teams": [
            {"name": "vision", "members": ["ana"], "quota": {"cpu": 8}},
            {"name": "nlp", "members": ["bo"], "quota": {"cpu": 8}},
        ],
    },
}
GANG = dict(resources=ResourceSpec(cpu=4, memory="128m", replicas=2), coscheduling=CoschedulingConfig("tpu-name"))


@pytest.fixture(scope="module")
def teams_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("iris-teams"), parse_config(FLEET, "teams fleet")) as cluster:
        yield cluster


def connect(cluster: Cluster, user: str) -> IrisClient:
    return IrisClient.connect(cluster.info.address, store=cluster.info.store_url, user=user)


def test_a_lender_reclaims_its_quota_from_a_borrower_within_the_grace(teams_cluster: Cluster, tmp_path: Path) -> None:
    """vision fills all 16 cores (8 borrowed); nlp's 8-core gang runs within grace + 5 s; vision keeps its 8."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with connect(teams_cluster, "ana") as ana, connect(teams_cluster, "bo") as bo:
        own = ana.submit_command(victim_script(first), name="own", priority="batch", **GANG)  # type: ignore[arg-type]
        wait_until(lambda: len(list(first.glob("run-*-0"))) == 2, timeout=90, what="vision's first gang runs")
        extra = ana.submit_command(victim_script(second), name="extra", priority="batch", **GANG)  # type: ignore[arg-type]
        wait_until(lambda: len(list(second.glob("run-*-0"))) == 2, timeout=90, what="vision borrows nlp's idle 8")
        marks = tmp_path / "lender"
        marks.mkdir()
        submitted = time.time()
        lender = bo.submit_command(["sh", "-c", f"date +%s.%N > {marks}/start-$IRIS_TASK_INDEX; sleep 2"],
                                   name="lender", priority="batch", **GANG)  # type: ignore[arg-type]  # fmt: skip
        wait_until(lambda: len(list(marks.glob("start-*"))) == 2, timeout=60, what="nlp's gang starts")
        started = max(float(p.read_text()) for p in marks.glob("start-*"))
        assert started - submitted <= GRACE + 5.0, f"nlp's gang started {started - submitted:.1f}s after submit"
        assert {"term-0-0", "term-1-0"} == {p.name for p in second.glob("term-*")}  # the borrowed gang, whole
        assert [] == list(first.glob("term-*"))  # vision's work within its quota was never touched
        assert JobState.SUCCEEDED == lender.wait(timeout=60).state
        again = wait_until(lambda: len(list(second.glob("run-*-1"))) == 2, timeout=90, what="the evicted gang reruns")
        assert again
        assert 1 == extra.status().preemptions
        assert JobState.RUNNING == own.status().state
        ana.terminate(own.job_id)
        ana.terminate(extra.job_id)


def test_the_cli_lists_teams_and_the_queue(teams_cluster: Cluster) -> None:
    """`iris team list` shows each team's quota; `iris queue` answers with a table."""
    shown = iris_cli(teams_cluster, "team", "list")
    assert 0 == shown.returncode, shown.stderr
    assert "vision" in shown.stdout and "nlp" in shown.stdout
