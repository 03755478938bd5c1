"""Teams on a local cluster: a lender reclaims what another team borrowed, whole gangs, within the grace."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import CoschedulingConfig, IrisClient, JobState, JobStatus, ResourceSpec, TeamStatus
from iris.client.iris_client import Job
from iris.config.cluster_file import parse_config
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


def read_page(cluster: Cluster, path: str) -> str:
    with urllib.request.urlopen(f"{cluster.info.dashboard_url}{path}", timeout=30) as page:
        return str(page.read().decode())


def placed_first(job: Job) -> JobStatus | None:
    status = job.status()
    return status if status.queue_position == 1 else None


def teams_settled(client: IrisClient) -> dict[str, TeamStatus] | None:
    """The team table once the reclaim shows in it (nlp runs its 8, vision its own 8, nothing borrowed)."""
    table = {t.team: t for t in client.list_teams()}
    done = "nlp" in table and table["nlp"].used.get("cpu") == 8 and table["vision"].used.get("cpu") == 8
    return table if done else None


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
        gate = marks / "go"  # the lender runs until the checks below are done (12 s once could end first)
        script = f"date +%s.%N > {marks}/start-$IRIS_TASK_INDEX; while [ ! -e {gate} ]; do sleep 0.1; done"
        lender = bo.submit_command(["sh", "-c", script], name="lender", priority="batch", **GANG)  # type: ignore[arg-type]
        # Written, not only created: the shell makes the file before `date` fills it.
        wait_until(lambda: [p for p in marks.glob("start-*") if p.read_text().strip()][1:], timeout=60,
                   what="nlp's gang starts")  # fmt: skip
        started = max(float(p.read_text()) for p in marks.glob("start-*"))
        assert started - submitted <= GRACE + 5.0, f"nlp's gang started {started - submitted:.1f}s after submit"
        assert {"term-0-0", "term-1-0"} == {p.name for p in second.glob("term-*")}  # the borrowed gang, whole
        assert [] == list(first.glob("term-*"))  # vision's work within its quota was never touched
        waiting = wait_until(lambda: placed_first(extra), timeout=10, what="the evicted gang first in the queue")
        assert ("vision", "batch") == (waiting.team, waiting.priority)
        table = wait_until(lambda: teams_settled(ana), timeout=10, what="the team table")
        vision, nlp = table["vision"], table["nlp"]
        assert (8.0, 8.0, 0.0) == (vision.quota["cpu"], vision.used["cpu"], vision.borrowed["cpu"])
        assert 1 == vision.pending_jobs
        assert (8.0, 0.0, 0) == (nlp.used["cpu"], nlp.lent["cpu"], nlp.pending_jobs)
        assert (1, extra.job_id, "vision") == (ana.queue()[0].position, ana.queue()[0].job_id, ana.queue()[0].team)
        page = read_page(teams_cluster, "/queue")  # the dashboard's queue: team and estimated start beside the job
        row = page[page.index(f'<tr data-job="{extra.job_id}">') :].split("</tr>")[0]
        assert "team vision" in row and 'class="estimate"' in row
        gate.touch()
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
    listed = iris_cli(teams_cluster, "queue")
    assert 0 == listed.returncode, listed.stderr
    assert "ESTIMATED START" in listed.stdout
    page = read_page(teams_cluster, "/teams")  # the dashboard's Teams page
    assert '<tr data-team="vision">' in page and '<tr data-team="nlp">' in page
