"""Spot capacity end to end: a preemption notice from a (fake) GCE metadata server reaches the tasks of its host.

Real agents on the session cluster watch a FakeMetadata server (through $GCE_METADATA_HOST); the test turns
`instance/preempted` to TRUE as GCP does before it takes a spot VM back. The task gets SIGTERM within a
second, saves a checkpoint into its IRIS_CHECKPOINT_DIR, the attempt counts as a preemption (not a failure)
and the next attempt, on another host, resumes from that checkpoint. The training loop is the worked example
of docs/spot.md, run as written there.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris import Constraint, CoschedulingConfig, IrisClient, JobState, JobStatus, ResourceSpec
from iris.config.cluster_file import LocalWorkerSpec, parse_config
from scheduler.types import AttrValue
from tests.platforms.tpu_fake import FakeMetadata
from tests.support import Cluster, forget_workers, running_cluster, wait_until

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spot.md"


def docs_example() -> Callable[..., dict[str, Any]]:
    """The `train` function of docs/spot.md's worked example, defined from the page's own code block."""
    text = DOCS.read_text()
    block = re.search(r"<!-- example: spot-training.*?-->\n```python\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/spot.md lost its worked example"
    namespace: dict[str, Any] = {"__name__": "spot_docs_example"}
    exec(compile(block[1], str(DOCS), "exec"), namespace)  # the docs' own example, run as a user would
    train: Callable[..., dict[str, Any]] = namespace["train"]
    return train


class Hosts:
    """Worker agents started for one test (removed after it), some watching a fake metadata server."""

    def __init__(self, cluster: Cluster, client: IrisClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cluster, self.client, self.monkeypatch = cluster, client, monkeypatch
        self.started: list[str] = []
        self.servers: list[FakeMetadata] = []

    def metadata(self) -> FakeMetadata:
        server = FakeMetadata({})
        self.servers.append(server)
        return server

    def start(self, names: list[str], attributes: list[dict[str, AttrValue]], watching: FakeMetadata | None,
              wait: bool = True) -> None:  # fmt: skip
        """Start agents (watching `watching`'s notices, or none) and, with `wait`, wait until they are registered
        (without, `registered` waits: agents started together register together)."""
        if watching is not None:
            self.monkeypatch.setenv("GCE_METADATA_HOST", watching.host)
        else:
            self.monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
        for name, attrs in zip(names, attributes, strict=True):
            self.cluster.local.start_worker(LocalWorkerSpec(name, 1000, 1 << 30, attrs))
            self.started.append(name)
        self.monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
        if wait:
            self.registered(names)

    def registered(self, names: list[str]) -> None:
        """Wait until the agents `names` are registered and healthy."""
        wait_until(lambda: set(names) <= {w.worker_id for w in self.client.list_workers() if w.healthy},
                   timeout=60, what=f"{names} registered")  # fmt: skip

    def remove(self, worker_ids: list[str], reason: str) -> None:
        """What SliceWorkflow tells the scheduler when the cloud took the workers' slice back."""
        import asyncio

        from temporalio.client import Client

        from activities.contracts import SCHEDULER_WORKFLOW_ID
        from workflows.messages import RemoveWorkers

        async def signal() -> None:
            temporal = await Client.connect(self.cluster.info.address)
            await temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(
                "remove_workers", RemoveWorkers(worker_ids, reason=reason)
            )

        asyncio.run(signal())

    def close(self) -> None:
        for worker_id in self.started:
            self.cluster.local.stop_worker(worker_id)
        if self.started:
            forget_workers(self.cluster, self.started)
        for server in self.servers:
            server.stop()


@pytest.fixture
def hosts(cluster: Cluster, client: IrisClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hosts]:
    made = Hosts(cluster, client, monkeypatch)
    try:
        yield made
    finally:
        made.close()


def test_notice_sigterm_checkpoint_and_resume(hosts: Hosts, client: IrisClient, tmp_path: Path) -> None:
    """The docs' training loop on a spot host: SIGTERM within 1 s of the notice, the checkpoint it saves then is
    where the next attempt (on another host) starts, and the attempt counts as a preemption naming its cause."""
    pool = f"spot-{uuid.uuid4().hex[:6]}"
    spot = hosts.metadata()
    hosts.start([f"{pool}-a"], [{"pool": pool}], watching=spot)
    train = docs_example()
    job = client.submit(train, kwargs=dict(total_steps=300, save_every=50, step_seconds=0.01),
                        checkpoint_dir=tmp_path / "ck", constraints=[Constraint("pool", "EQ", pool)],
                        name="spot-train")  # fmt: skip
    checkpoint = tmp_path / "ck" / "0" / "state.json"
    wait_until(checkpoint.exists, timeout=60, what="the first attempt's first checkpoint")
    noticed = spot.set_instance("preempted", "TRUE")

    def preempted() -> JobStatus | None:
        status = job.status()
        return status if status.tasks and status.tasks[0].preemption_count == 1 else None

    waiting = wait_until(preempted, timeout=60, what="the attempt counted as a preemption")
    task = waiting.tasks[0]
    assert 0 == task.failure_count
    assert f"preempted on {pool}-a: GCP preemption notice (instance/preempted=TRUE)" in task.error
    wait_until(lambda: any(w.worker_id == f"{pool}-a" and w.cordoned for w in client.list_workers()), timeout=30,
               what="the noticed host cordoned itself")  # fmt: skip
    hosts.start([f"{pool}-b"], [{"pool": pool}], watching=None)  # somewhere to go on

    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert (1, 0, 1, f"{pool}-b") == (status.tasks[0].preemption_count, status.tasks[0].failure_count,
                                      status.tasks[0].attempt, status.tasks[0].worker_id)  # fmt: skip
    (state,) = job.results()
    first, second = state["log"]
    assert 300 == state["step"]
    assert (0, 0, 1) == (first["attempt"], first["resumed_at"], second["attempt"])
    assert first["sigterm_at"] is not None and first["sigterm_at"] - noticed < 1.0
    assert first["saved_at"] == second["resumed_at"]  # the checkpoint written after SIGTERM was read
    print(f"notice -> SIGTERM: {1000 * (first['sigterm_at'] - noticed):.0f} ms")


def _stamps(folder: Path, pattern: str) -> list[float] | None:
    """The four tasks' times in the files matching `pattern`, once all four are written (a file appears, empty,
    when the shell opens it for `date`'s output, a moment before the time is in it)."""
    texts = [p.read_text().strip() for p in folder.glob(pattern)]
    return [float(t) for t in texts] if len(texts) == 4 and all(texts) else None


def test_gang_notice_and_rerun(hosts: Hosts, client: IrisClient, tmp_path: Path) -> None:
    """A 4-host gang on a spot slice: every task has SIGTERM within 1 s of the notice, and the gang runs again
    whole on another slice; prints both times (docs/performance.md)."""
    tag = uuid.uuid4().hex[:6]
    spot_slice, standby_slice = f"sg-{tag}-spot", f"sg-{tag}-standby"
    spot = hosts.metadata()

    def slice_hosts(name: str) -> tuple[list[str], list[dict[str, AttrValue]]]:
        attrs: list[dict[str, AttrValue]] = [
            {"tpu-name": name, "tpu-worker-id": i, "tpu-topology": "v5e-16", "pool": f"sg-{tag}"} for i in range(4)
        ]
        return [f"{name}-{i}" for i in range(4)], attrs

    spot_hosts, spot_attrs = slice_hosts(spot_slice)
    standby, standby_attrs = slice_hosts(standby_slice)
    hosts.start(spot_hosts, spot_attrs, watching=spot, wait=False)  # the eight agents start up side by side
    hosts.start(standby, standby_attrs, watching=None, wait=False)
    hosts.registered(spot_hosts + standby)
    for worker_id in standby:  # the gang's first attempt must land on the spot slice
        client.cordon_worker(worker_id)
    script = (
        f"trap 'date +%s.%N > {tmp_path}/term-$IRIS_ATTEMPT-$IRIS_TASK_INDEX; exit 143' TERM; "
        f"date +%s.%N > {tmp_path}/run-$IRIS_ATTEMPT-$IRIS_TASK_INDEX; "
        '[ "$IRIS_ATTEMPT" != 0 ] || { while :; do sleep 0.05; done; }'
    )
    job = client.submit_command(
        ["bash", "-c", script], resources=ResourceSpec(cpu=1, memory="512m", replicas=4),
        coscheduling=CoschedulingConfig("tpu-name"), constraints=[Constraint("pool", "EQ", f"sg-{tag}")],
        name="spot-gang",
    )  # fmt: skip

    def why() -> str:
        status = job.status()
        workers = {w.worker_id: w for w in client.list_workers()}
        hosts_now = [(h, workers[h].healthy, workers[h].cordoned) if h in workers else (h, "gone") for h in spot_hosts]
        return (f"job {status.state.value} {status.task_state_counts} on {[t.worker_id for t in status.tasks]} "
                f"pending: {status.pending_reason!r}; spot hosts (id, healthy, cordoned): {hosts_now}")  # fmt: skip

    wait_until(lambda: len(list(tmp_path.glob("run-0-*"))) == 4, timeout=60, what="the gang running", explain=why)
    for worker_id in standby:
        client.cordon_worker(worker_id, cordoned=False)
    noticed = spot.set_instance("preempted", "TRUE")
    terms = wait_until(lambda: _stamps(tmp_path, "term-0-*"), timeout=30, what="SIGTERM in every task")
    to_sigterm = max(terms) - noticed
    reruns = wait_until(lambda: _stamps(tmp_path, "run-1-*"), timeout=90, what="the gang running again")
    to_rerun = max(reruns) - noticed
    status = job.wait(timeout=60)
    print(f"4-host gang: notice -> every task has SIGTERM {1000 * to_sigterm:.0f} ms; "
          f"notice -> gang running again on another slice {to_rerun:.2f} s")  # fmt: skip
    assert to_sigterm < 1.0
    assert JobState.SUCCEEDED == status.state
    assert [1] * 4 == [t.preemption_count for t in status.tasks]
    assert [0] * 4 == [t.failure_count for t in status.tasks]
    assert standby == [t.worker_id for t in status.tasks]


def test_no_notice_no_file(client: IrisClient) -> None:
    """Every task has IRIS_PREEMPTION_NOTICE_FILE, a path that does not exist while no notice came."""

    def look() -> tuple[str, bool, bool]:
        import os

        import iris

        path = os.environ["IRIS_PREEMPTION_NOTICE_FILE"]
        return path, Path(path).exists(), iris.preemption_notice().is_set()

    job = client.submit(look, constraints=[Constraint("pool", "EQ", "cpu")])
    job.wait(timeout=60)
    ((path, exists, is_set),) = job.results()
    assert path.endswith("preemption-notice") and (False, False) == (exists, is_set)


def test_host_taken_back_is_a_preemption_naming_the_slice(hosts: Hosts, client: IrisClient, tmp_path: Path) -> None:
    """The slice of a running task is lost (as SliceWorkflow reports a PREEMPTED node): the attempt is stopped at
    once and counted as a preemption whose error names the slice's fate; it runs again elsewhere."""
    pool = f"lost-{uuid.uuid4().hex[:6]}"
    hosts.start([f"{pool}-a"], [{"pool": pool}], watching=None)
    script = f'echo "$IRIS_ATTEMPT" >> {tmp_path}/runs; [ "$IRIS_ATTEMPT" != 0 ] || sleep 300'
    job = client.submit_command(["sh", "-c", script], constraints=[Constraint("pool", "EQ", pool)], name="lost")
    wait_until(lambda: (tmp_path / "runs").exists(), timeout=60, what="the task running")
    hosts.remove([f"{pool}-a"], reason=f"slice {pool} preempted: node preempted")

    def preempted() -> JobStatus | None:
        status = job.status()
        return status if status.tasks and status.tasks[0].preemption_count == 1 else None

    waiting = wait_until(preempted, timeout=60, what="the attempt counted as a preemption")
    task = waiting.tasks[0]
    assert 0 == task.failure_count
    assert f"its host is gone (slice {pool} preempted: node preempted)" in task.error, task.error
    hosts.start([f"{pool}-b"], [{"pool": pool}], watching=None)
    status = job.wait(timeout=120)
    assert (JobState.SUCCEEDED, 1, 0) == (status.state, status.tasks[0].preemption_count,
                                          status.tasks[0].failure_count)  # fmt: skip


EVICTION_FLEET = {
    "local": {"worker_groups": [{"name": "one", "count": 1, "resources": {"cpu": 1, "memory": "2g"}}]},
    "sharing": {"preemption_grace": "3s", "default_credits": 10_000},
}


def test_an_eviction_posts_the_notice_file_before_sigterm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Evicted for higher-band work, a task finds its IRIS_PREEMPTION_NOTICE_FILE when its SIGTERM comes, as
    after a cloud's notice: one way to handle both. Exiting 0 then (a handler that saved its state and
    returned) is still a preemption: it runs again and counts no failure."""
    marks = tmp_path_factory.mktemp("marks")
    script = (
        f"trap 'cat \"$IRIS_PREEMPTION_NOTICE_FILE\" > {marks}/term-$IRIS_ATTEMPT 2>&1; exit 0' TERM; "
        f'echo run > {marks}/run-$IRIS_ATTEMPT; [ "$IRIS_ATTEMPT" != 0 ] || {{ sleep 300 & wait; }}'
    )
    home = tmp_path_factory.mktemp("iris-eviction")
    with running_cluster(home, parse_config(EVICTION_FLEET, "eviction fleet")) as cluster:
        address, store = cluster.info.address, cluster.info.store_url
        with IrisClient.connect(address, store=store, user="ana") as ana, \
                IrisClient.connect(address, store=store, user="bob") as bob:  # fmt: skip
            spec = ResourceSpec(cpu=1, memory="256m")
            sweep = ana.submit_command(["sh", "-c", script], resources=spec, priority="batch", name="sweep")
            wait_until(lambda: (marks / "run-0").exists(), timeout=60, what="the batch task running")
            urgent = bob.submit_command(["true"], resources=spec, priority="interactive", name="urgent")
            assert JobState.SUCCEEDED == urgent.wait(timeout=90).state
            done = sweep.wait(timeout=90)
    assert (JobState.SUCCEEDED, 1, 0) == (done.state, done.tasks[0].preemption_count, done.tasks[0].failure_count)
    assert (marks / "term-0").read_text().startswith("evicted: for "), (marks / "term-0").read_text()
    assert (marks / "run-1").exists()  # the evicted attempt ran again
