"""Fault injection on real local clusters: real processes, real signals, no mocks.

Each destructive test gets its own `LocalCluster` in a fresh IRIS_HOME from
`make_cluster`; the teardown stops the cluster and then SIGKILLs any process
whose command line still names that home (a task orphaned by a killed agent),
so no test leaves a process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from iris import IrisClient, JobStatus, WorkerStatus
from iris.config.cluster_file import LocalWorkerSpec, parse_config
from iris.local.cluster import LocalCluster
from tests.support import Cluster, group_members, lines, pid_running, proc_stat, short_dead_controller_waits, wait_until

__all__ = ["group_members", "lines", "pid_running", "proc_stat", "wait_until"]  # re-exported for the tests


def processes_mentioning(text: str) -> list[int]:
    """Pids (not ours) whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and pid_running(int(entry.name)):
                found.append(int(entry.name))
    return found


@dataclass
class FaultCluster(Cluster):
    """A running local cluster, its client, and a scratch directory its tasks can write to."""

    client: IrisClient
    specs: dict[str, LocalWorkerSpec]
    work: Path

    @property
    def store_root(self) -> Path:
        return self.local.home / "store"

    def workers(self) -> dict[str, WorkerStatus]:
        """worker id -> WorkerStatus, as the scheduler reports them."""
        return {w.worker_id: w for w in self.client.list_workers()}

    def healthy(self, worker_id: str) -> bool:
        w = self.workers().get(worker_id)
        return bool(w is not None and w.healthy)

    def status(self, job_id: str) -> JobStatus:
        return self.client.job_status(job_id)

    def alive(self) -> list[str]:
        """Names of the recorded cluster processes that are running."""
        info = self.local.status()
        assert info is not None
        return sorted(n for n in info.pids if n not in info.dead)


def fleet(*groups: Mapping[str, Any]) -> dict[str, Any]:
    """A cluster config with these local worker groups."""
    return {"local": {"worker_groups": list(groups)}}


def group(name: str, cpu: float, memory: str = "1g", count: int = 1, **attributes: Any) -> dict[str, Any]:
    """One local worker group: `count` workers `<name>-<i>` with `cpu` cores and these attributes."""
    return {"name": name, "count": count, "resources": {"cpu": cpu, "memory": memory}, "attributes": attributes}


def _kill_leftovers(home: Path) -> None:
    """SIGKILL whatever still names `home` on its command line (orphaned task processes)."""
    for pid in processes_mentioning(str(home)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def start_cluster(
    home: Path, groups: Sequence[Mapping[str, Any]], dynamic_config: Mapping[str, str] | None = None
) -> FaultCluster:
    """Start a cluster in `home` with these worker groups and wait until every worker is healthy."""
    local = LocalCluster(home)
    config = parse_config(fleet(*groups), "fault fleet")
    try:
        info = local.up(config, dynamic_config=dynamic_config)
    except BaseException:
        _kill_leftovers(home)
        raise
    client = IrisClient.connect(info.address, store=info.store_url)
    work = home / "work"
    work.mkdir(exist_ok=True)
    return FaultCluster(local, info, client, {s.worker_id: s for s in config.local_workers()}, work)


def stop_cluster(fc: FaultCluster) -> None:
    """Continue what a test paused, stop every cluster process, then kill orphaned tasks."""
    info = fc.local.status()
    if info is not None:  # a SIGSTOPped process would not act on SIGTERM until continued
        for name in info.pids:
            with contextlib.suppress(ValueError):
                fc.local.kill_process(name, signal.SIGCONT)
    fc.local.down()
    _kill_leftovers(fc.local.home)


@contextlib.contextmanager
def module_cluster(
    home: Path, groups: Sequence[Mapping[str, Any]], agent_env: Mapping[str, str]
) -> Iterator[FaultCluster]:
    """A cluster a test module shares (its `shared` fixture), stopped after the module. `agent_env` (IRIS_*
    settings the daemons inherit) is set while it lives: its agents, and one a test starts again, declare them."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in agent_env.items():
            env.setenv(name, value)
        fc = start_cluster(home, groups)
        try:
            yield fc
        finally:
            stop_cluster(fc)


MakeCluster = Callable[..., FaultCluster]


@pytest.fixture
def make_cluster(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeCluster]:
    """Factory: start a fresh cluster with the given worker groups; everything is stopped after the test.

    `kills_controller`: the test SIGKILLs a controller and waits for the cluster to carry on, so Temporal
    gives up on the dead one after seconds, not 10 s (tests.support.short_dead_controller_waits);
    `sticky_timeout`: the controllers' --sticky-timeout instead of that one's."""
    started: list[FaultCluster] = []

    def make(
        *groups: Mapping[str, Any],
        dynamic_config: Mapping[str, str] | None = None,
        kills_controller: bool = False,
        sticky_timeout: float | None = None,
    ) -> FaultCluster:
        if kills_controller:
            dynamic_config = short_dead_controller_waits(monkeypatch, dynamic_config)
        if sticky_timeout is not None:  # every controller started from now inherits it (at each restart too)
            monkeypatch.setenv("IRIS_STICKY_TIMEOUT_SECONDS", f"{sticky_timeout:g}")
        fc = start_cluster(tmp_path_factory.mktemp("iris-fault"), groups, dynamic_config)
        started.append(fc)
        return fc

    yield make
    for fc in started:
        stop_cluster(fc)


@pytest.fixture
def c(shared: FaultCluster, request: pytest.FixtureRequest) -> Iterator[FaultCluster]:
    """A module's shared cluster (its module fixture `shared`), its scratch directory this test's own; any task
    process still naming that directory afterwards (orphaned by a test that failed) is killed, as a cluster of its
    own would have been stopped."""
    work = shared.work / request.node.name
    work.mkdir()
    yield FaultCluster(shared.local, shared.info, shared.client, shared.specs, work)
    for pid in processes_mentioning(str(work)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
