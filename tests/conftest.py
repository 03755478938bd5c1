"""The session's real local cluster (Temporal dev server, controller, worker agents), shared by every suite.

The fleet: two plain CPU workers and one fake 4-host TPU slice (`slice-a`,
topology v5e-16, `tpu-worker-id` 0..3). Tests that need other workers start
them with `LocalCluster.start_worker` and stop them again. It starts on first
use, so suites that never ask for it never pay for it.
"""

from __future__ import annotations

import compileall
import gc
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from iris import IrisClient
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from tests.support import Cluster

# Every controller the suite starts checks that no query changes its workflow's state (iris/controller/query_guard.py):
# a query that did would make a replay decide differently (docs/reliability.md, "Replays").
os.environ.setdefault("IRIS_QUERY_GUARD", "1")

TEST_FLEET = {
    "local": {
        "worker_groups": [
            {
                "name": "cpu",
                "count": 2,
                "resources": {"cpu": 2, "memory": "4g"},
                "attributes": {"pool": "cpu", "rev": "1.10"},  # a string that reads like a number
            },
            {
                "name": "slice-a",
                "count": 4,
                "resources": {"cpu": 1, "memory": "2g"},
                "attributes": {"tpu-name": "slice-a", "tpu-topology": "v5e-16"},
                "index_attribute": "tpu-worker-id",
            },
        ]
    }
}


# The fast lane is `pytest -m "not e2e"`: every test that starts a cluster, a Temporal dev server or an
# engine (dockerd, containerd, sshd) is marked `e2e` here, so no test has to remember the marker.
E2E_DIRS = ("e2e", "faults", "deploy")
E2E_FIXTURES = frozenset({"cluster", "make_cluster", "deployment", "dockerd", "containerd", "engine_runtime", "sshd"})
E2E_CALLS = (
    "workflows_on_dev_server(", "running_cluster(", "LocalCluster(", "WorkflowEnvironment.start_local(",
    "start_sshd(", "PrivateDockerd(", "PrivateContainerd(", "start_dockerd(", "start_containerd(",
    '"cluster", "up"',  # `iris cluster up` in a subprocess
)
TESTS = Path(__file__).parent


@cache
def _starts_processes(module: Path) -> bool:
    """Whether a test module calls any helper that starts a cluster, a dev server or an engine."""
    text = module.read_text()
    return any(call in text for call in E2E_CALLS)


# The files that take longest (a minute or more of one worker's time each), longest first. `-n N --dist
# loadfile` hands files out in collection order, so these start first and the short ones fill in around them:
# otherwise the run ends with one worker still on a long file the others could not share (a scheduling
# hint only: a file missing here, or listed in the wrong place, costs minutes, never a result).
LONGEST_FIRST = (
    "faults/test_component_faults.py", "faults/test_control_plane_outages.py", "e2e/test_fleet.py",
    "test_scheduler_interleaving.py", "faults/test_chaos.py", "faults/test_fencing.py",
    "faults/test_dependency_restarts.py", "runtimes/test_agents_in_containers.py", "e2e/test_waves.py",
    "e2e/test_bench_smoke.py", "hostile/test_clean_exit.py", "auth/test_team_mode.py", "hostile/test_cli_errors.py",
)


# The project's packages: what the processes the suite starts (commands, controllers, agents, tasks) import.
PACKAGES = ("iris", "workflows", "activities", "scheduler", "worker_agent", "benchmarks")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile the project's modules once, before the run starts its processes.

    The suite starts hundreds of Python processes. Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE
    set, as on CI machines) each would compile every module it imports again: ~0.3 s of CPU per `iris`
    command on this kind of machine. Compiled here once, they all read the result."""
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: its controller compiled before starting it
    for package in PACKAGES:
        compileall.compile_dir(TESTS.parent / package, quiet=1)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what collection made (~250,000 objects: Iris, the SDK, every test module) out of every later full
    collection, as the controller does with what it imported (iris/controller/gc_tuning.py). Scanning them took
    ~120 ms of an idle core, in whichever thread allocated next; in a test's in-process Temporal worker that is a
    workflow activation, which the SDK's 2 s deadlock detector times (a suite run saw it fire once, with the
    collector on the stack)."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        in_e2e_dir = path.relative_to(TESTS).parts[0] in E2E_DIRS
        fixtures = set(getattr(item, "fixturenames", ()))
        if in_e2e_dir or fixtures & E2E_FIXTURES or _starts_processes(path):
            item.add_marker(pytest.mark.e2e)
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(Path(item.path).relative_to(TESTS).as_posix(), len(first)))  # stable


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("iris-home")
    local = LocalCluster(home)
    info = local.up(parse_config(TEST_FLEET, "test fleet"))
    try:
        yield Cluster(local, info)
    finally:
        local.down()


@pytest.fixture(scope="session")
def client(cluster: Cluster) -> Iterator[IrisClient]:
    with IrisClient.connect(cluster.info.address, store=cluster.info.store_url) as session_client:
        yield session_client
