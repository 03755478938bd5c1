"""The embedded local cluster: real Temporal dev servers in a temporary IRIS_HOME, always stopped after.

The controller and worker commands are replaced by small stand-ins here (the real ones
are exercised by the end-to-end tests), so these tests check process management and
readiness on their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from activities.platforms.local_process import find_workers
from iris.config.cluster_file import ClusterConfig, LocalWorkerSpec, Runtime, WorkerGroupConfig
from iris.deploy.temporal_setup import INDEXED_TYPES
from iris.local import cluster as local_cluster
from iris.local.cluster import (
    SEARCH_ATTRIBUTES,
    ClusterInfo,
    Component,
    LocalCluster,
    iris_home,
    pid_alive,
    temporal_binary,
    temporal_command,
    worker_command,
)
from tests.support import wait_until

TEMPORAL_ONLY: tuple[Component, ...] = ("temporal",)

FAKE_CONTROLLER = textwrap.dedent(
    """
    # Stand-in for `iris controller serve`: hosts an `iris-scheduler` workflow whose
    # healthy_worker_count query answers the number given on the command line.
    import asyncio, sys
    from temporalio import workflow
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    @workflow.defn(name="FakeScheduler")
    class FakeScheduler:
        def __init__(self) -> None:
            self.count = 0

        @workflow.run
        async def run(self, count: int) -> None:
            self.count = count
            await workflow.wait_condition(lambda: False)

        @workflow.query
        def healthy_worker_count(self) -> int:
            return self.count

    async def main() -> None:
        client = await Client.connect(sys.argv[1])
        async with Worker(client, task_queue="fake", workflows=[FakeScheduler],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            await client.start_workflow(
                "FakeScheduler", int(sys.argv[2]), id="iris-scheduler", task_queue="fake"
            )
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)

# Stand-in for `iris worker serve`: a process with a child of its own (like a running task).
FAKE_WORKER = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    """A LocalCluster in a fresh IRIS_HOME, brought down (all processes stopped) after the test."""
    home = tmp_path / "iris-home"
    monkeypatch.setenv("IRIS_HOME", str(home))
    cluster = LocalCluster(home)
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def fake_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the controller and worker commands by the stand-ins above."""
    script = tmp_path / "fake_controller.py"
    script.write_text(FAKE_CONTROLLER)

    def controller_command(*, address: str, store_url: str) -> list[str]:
        return [sys.executable, str(script), address, "2"]

    def worker_command(spec: LocalWorkerSpec, *, address: str, store_url: str, task_api: str = "") -> list[str]:
        return [sys.executable, "-c", FAKE_WORKER, spec.worker_id]

    monkeypatch.setattr(local_cluster, "controller_command", controller_command)
    monkeypatch.setattr(local_cluster, "worker_command", worker_command)


def two_workers() -> ClusterConfig:
    """A config with two plain local workers, w-0 and w-1."""
    return ClusterConfig(
        worker_groups=(WorkerGroupConfig(name="w", count=2, cpu_millis=500, memory_bytes=10**9),)
    )


def process_group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in group `pgid`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def test_iris_home_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """IRIS_HOME picks the state directory; without it the default is ~/.iris."""
    monkeypatch.setenv("IRIS_HOME", str(tmp_path))
    assert iris_home() == tmp_path
    monkeypatch.delenv("IRIS_HOME")
    assert iris_home() == Path.home() / ".iris"


def test_temporal_command_flags_exist_in_this_cli() -> None:
    """Every flag the local cluster passes to `temporal server start-dev` is one this CLI version knows."""
    argv = temporal_command(
        binary=temporal_binary(), port=1, ui_port=2, db_path=Path("x.db"), dynamic_config={"a.b": "1"},
        ui_public_path="/temporal",
    )
    help_text = subprocess.run(
        [*argv[:3], "--help"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    options = subprocess.run(
        [argv[0], "options"], capture_output=True, text=True, check=True, timeout=30
    ).stdout  # global flags such as --log-level
    for flag in {a for a in argv if a.startswith("--")}:
        assert f"{flag} " in help_text + options, flag


def test_temporal_command_passes_dynamic_config_verbatim() -> None:
    """Dynamic config entries become `--dynamic-config-value K=V` with the value unchanged."""
    argv = temporal_command(
        binary=Path("temporal"),
        port=7,
        ui_port=8,
        db_path=Path("/h/temporal.db"),
        dynamic_config={"limit.historyCount.suggestContinueAsNew": "20"},
    )
    values = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--dynamic-config-value"]
    assert "limit.historyCount.suggestContinueAsNew=20" in values
    assert "history.transferProcessorMaxPollRPS=1000" in values  # the default tuning stays
    assert "history.taskSchedulerEnableExecutionQueueScheduler=true" in values  # a busy workflow's tasks queue
    assert 'history.timerProcessorMaxTimeShift="1ms"' in values  # a 1 ms timer fires in ms, not ~1 s
    with pytest.raises(ValueError, match="dynamic_config: invalid key"):
        temporal_command(binary=Path("t"), port=7, ui_port=8, db_path=Path("d"), dynamic_config={"a=b": "1"})


def test_worker_command_formats_resources_and_attributes() -> None:
    """Cores go as a float, memory as bytes, bools as true/false and ints as digits; tasks run as the user
    and are reached on loopback."""
    spec = LocalWorkerSpec(
        worker_id="slice-0",
        cpu_millis=500,
        memory_bytes=2048,
        attributes={"tpu-worker-id": 0, "taint:spot": True, "zone": "z"},
        runtime=Runtime.DOCKER,
        image="python:3.11",
    )
    argv = worker_command(spec, address="127.0.0.1:1", store_url="file:///s")
    assert argv[:3] == [sys.executable, "-m", "iris"]
    assert argv[3:] == [
        "worker", "serve",
        "--temporal", "127.0.0.1:1",
        "--store", "file:///s",
        "--worker-id", "slice-0",
        "--cpu", "0.5",
        "--memory", "2048",
        "--runtime", "docker",
        "--task-user", "",
        "--address", "127.0.0.1",
        "--default-image", "python:3.11",
        "--attribute", "tpu-worker-id=0",
        "--attribute", "taint:spot=true",
        "--attribute", "zone=z",
    ]  # fmt: skip


async def test_temporal_starts_with_search_attributes_and_stops_cleanly(cluster: LocalCluster) -> None:
    """`up` starts a dev server a client can reach, with IrisJobState registered; `down` leaves no process."""
    info = cluster.up(components=TEMPORAL_ONLY)
    assert info.running
    assert info.address.startswith("127.0.0.1:")
    assert cluster.status() == info

    client = await Client.connect(info.address)
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert response.custom_attributes[name] == INDEXED_TYPES[kind]

    pid = info.pids["temporal"]
    cluster.down()
    assert not pid_alive(pid)
    assert process_group_members(pid) == []
    assert cluster.status() is None
    assert (cluster.home / "temporal.db").exists()


def test_second_up_is_a_no_op_and_restart_reuses_the_db(cluster: LocalCluster) -> None:
    """`up` on a running cluster starts nothing; after `down`, `up` reopens the same temporal.db."""
    first = cluster.up(components=TEMPORAL_ONLY)
    again = cluster.up(components=TEMPORAL_ONLY)
    assert again.already_running
    assert again.pids == first.pids
    db = cluster.home / "temporal.db"
    inode = db.stat().st_ino

    cluster.down()
    second = cluster.up(components=TEMPORAL_ONLY)
    assert second.running
    assert second.pids != first.pids
    assert db.stat().st_ino == inode
    assert f"--db-filename {db}" in (cluster.home / "logs" / "temporal.log").read_text().rsplit("===", 1)[1]


async def test_after_down_the_database_file_alone_holds_the_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    """`down` kills the dev server rather than wait out its drain: what it had acknowledged is in temporal.db
    itself afterwards, so that file alone, copied to another home, brings the workflows back."""
    info = cluster.up(components=TEMPORAL_ONLY)
    client = await Client.connect(info.address)
    await client.start_workflow("NoWorkerServesThis", id="kept-by-the-db", task_queue="nobody")
    cluster.down()
    assert not pid_alive(info.pids["temporal"])
    wal = cluster.home / "temporal.db-wal"
    assert not wal.exists() or 0 == wal.stat().st_size
    other = LocalCluster(tmp_path / "other-home")
    (tmp_path / "other-home").mkdir()
    (tmp_path / "other-home" / "temporal.db").write_bytes((cluster.home / "temporal.db").read_bytes())
    try:
        moved = await Client.connect(other.up(components=TEMPORAL_ONLY).address)
        described = await moved.get_workflow_handle("kept-by-the-db").describe()
        assert "NoWorkerServesThis" == described.workflow_type
    finally:
        other.down()


def test_concurrent_up_starts_one_cluster(cluster: LocalCluster) -> None:
    """Two `up` calls at once (threads here, processes in life) share one cluster thanks to the lock file."""
    results: list[ClusterInfo] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(LocalCluster(cluster.home).up(components=TEMPORAL_ONLY))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2
    assert results[0].pids == results[1].pids
    assert sorted(r.already_running for r in results) == [False, True]


def test_a_dead_server_is_reported_and_started_again(cluster: LocalCluster) -> None:
    """If Temporal died without `down`, status says not running and the next `up` starts the server again."""
    first = cluster.up(components=TEMPORAL_ONLY)
    assert cluster.kill_process("temporal", signal.SIGKILL, wait=5.0)
    stale = cluster.status()
    assert stale is not None
    assert not stale.running
    assert stale.dead == ["temporal"]
    fresh = cluster.up(components=TEMPORAL_ONLY)
    assert fresh.running
    assert not fresh.already_running
    assert fresh.pids["temporal"] != first.pids["temporal"]
    assert ["temporal"] == fresh.restarted


@pytest.mark.usefixtures("fake_commands")
def test_full_stack_waits_for_workers_and_stops_their_tasks(cluster: LocalCluster) -> None:
    """With controller and workers, `up` waits for the healthy count; `down` kills workers' process trees."""
    info = cluster.up(two_workers(), ready_timeout=30)
    assert info.worker_ids == ["w-0", "w-1"]
    assert sorted(info.pids) == ["controller", "temporal", "worker-w-0", "worker-w-1"]
    assert info.dead == []
    worker_pid = info.pids["worker-w-0"]
    assert os.getpgid(worker_pid) == worker_pid  # detached: its own session and group

    cluster.down()
    for pid in info.pids.values():
        assert not pid_alive(pid)
        assert process_group_members(pid) == []  # the workers' `sleep` children too


def test_a_cluster_left_by_another_build_says_what_to_do(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade that changed Iris's workflow code, the scheduler is pinned to the old build and no
    controller serves it: `up` says so at once, and what to do (it waited out its timeout, then said "the
    scheduler has not run a workflow task on the new controller yet")."""
    monkeypatch.setenv("IRIS_BUILD_ID", "old-build")
    cluster.up(two_workers(), ready_timeout=60)
    cluster.down()
    monkeypatch.setenv("IRIS_BUILD_ID", "new-build")
    with pytest.raises(RuntimeError, match=r"runs on Iris build old-build, which this Iris \(build new-build\)") as e:
        cluster.up(None, ready_timeout=60)
    assert "iris cluster down" in str(e.value) and str(cluster.home) in str(e.value)


@pytest.mark.usefixtures("fake_commands")
def test_killed_worker_can_be_restarted(cluster: LocalCluster) -> None:
    """A worker killed with SIGKILL shows as dead and `start_worker` brings the same id back."""
    config = two_workers()
    cluster.up(config, wait=False)
    assert cluster.kill_process("w-1", signal.SIGKILL, wait=5.0)
    status = cluster.status()
    assert status is not None
    assert status.running
    assert status.dead == ["worker-w-1"]

    spec = config.local_workers()[1]
    pid = cluster.start_worker(spec)
    status = cluster.status()
    assert status is not None
    assert status.dead == []
    assert status.pids["worker-w-1"] == pid
    with pytest.raises(ValueError, match="worker_id: worker 'w-1' is already running"):
        cluster.start_worker(spec)


def test_failed_controller_stops_everything_and_names_the_logs(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the controller exits during startup, `up` fails fast naming its log, and nothing keeps running."""
    monkeypatch.setattr(
        local_cluster,
        "controller_command",
        lambda *, address, store_url: [sys.executable, "-c", "raise SystemExit('no controller here')"],
    )
    with pytest.raises(RuntimeError, match=r"controller exited.*controller\.log") as failure:
        cluster.up(ClusterConfig(), components=("temporal", "controller"), ready_timeout=30)
    assert "no controller here" in (cluster.home / "logs" / "controller.log").read_text()
    assert cluster.status() is None
    state = (cluster.home / "cluster.json").read_text()
    assert '"pids": {}' in state, failure.value


def test_cluster_home_and_its_files_are_private_to_the_user(cluster: LocalCluster) -> None:
    """IRIS_HOME is 0700; the state file, the database and every process log are 0600 (a shared host's other users
    cannot read job names, arguments or outputs)."""
    import stat

    cluster.up(components=TEMPORAL_ONLY)
    try:
        assert 0o700 == stat.S_IMODE(cluster.home.stat().st_mode)
        files = [cluster.state_path, cluster.home / "temporal.db", *cluster.home.glob("**/*.log")]
        assert len(files) >= 3
        for path in files:
            assert (path.name, 0o600) == (path.name, stat.S_IMODE(path.stat().st_mode))
    finally:
        cluster.down()


# What the dev server printed when another process took its port between its own check and its
# listen (seen in CI): the reason, then a panic and its goroutine dump, far longer than a log tail.
PANIC_AFTER_LISTEN = """time=2026-11-26T04:18:41.993 level=ERROR msg="Failed to start gRPC listener" \\
error="listen tcp 127.0.0.1:43289: bind: address already in use" service=frontend address=127.0.0.1:43289
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x20 pc=0x2bb0889]

goroutine 1 [running]:
""" + "go.temporal.io/server/service/frontend.NewHTTPAPIServer(0x3057a33e9208, ...)\n\t/fx.go:1064 +0x2a7\n" * 60


def test_a_port_taken_before_the_server_binds_it_is_tried_again(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev server lost its port to another process and panicked: `up` starts it on other ports.

    The panic's goroutine dump once pushed the reason out of the output `up` read, so
    `iris cluster up` failed instead of trying again.
    """
    real = local_cluster.temporal_command
    ports: list[int] = []

    def first_one_panics(**kwargs: Any) -> list[str]:
        ports.append(kwargs["port"])
        if len(ports) > 1:
            return real(**kwargs)
        return [sys.executable, "-c", f"import sys; sys.stdout.write({PANIC_AFTER_LISTEN!r}); sys.exit(2)"]

    monkeypatch.setattr(local_cluster, "temporal_command", first_one_panics)
    info = cluster.up(components=TEMPORAL_ONLY)
    assert info.running
    assert 2 == len(ports) and info.address.endswith(f":{ports[1]}")
    assert "address already in use" in cluster.log_path("temporal").read_text()


def test_a_port_another_process_listens_on_is_tried_again(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process listens on the picked port before the server starts: `up` starts on other ports."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy])
        real = local_cluster.free_port
        monkeypatch.setattr(local_cluster, "free_port", lambda *a, **k: next(picks, None) or real(*a, **k))
        info = cluster.up(components=TEMPORAL_ONLY)
    assert info.running and not info.address.endswith(f":{busy}")


def test_a_server_that_fails_to_start_is_reported_by_its_reason_not_its_stack_dump(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any other panic fails `up` with the panic's message; the goroutine dump stays in the log."""
    crash = PANIC_AFTER_LISTEN.replace("bind: address already in use", "open temporal.db: disk I/O error")
    monkeypatch.setattr(
        local_cluster, "temporal_command",
        lambda **_: [sys.executable, "-c", f"import sys; sys.stdout.write({crash!r}); sys.exit(2)"],
    )  # fmt: skip
    with pytest.raises(RuntimeError) as failed:
        cluster.up(components=TEMPORAL_ONLY)
    assert "disk I/O error" in str(failed.value) and "panic: runtime error" in str(failed.value)
    assert "goroutine" not in str(failed.value)


def test_a_dead_server_comes_back_on_its_address_even_from_time_wait(cluster: LocalCluster) -> None:
    """`up` on a cluster whose dev server was SIGKILLed with clients connected restarts just the server, on the
    same address (its port in TIME_WAIT is reused) and database, and says it restarted it."""
    first = cluster.up(components=TEMPORAL_ONLY)

    async def connect_and_list() -> None:
        client = await Client.connect(first.address)
        await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default"))

    import asyncio

    asyncio.run(connect_and_list())
    assert cluster.kill_process("temporal", signal.SIGKILL, wait=5.0)
    again = cluster.up(components=TEMPORAL_ONLY)
    assert (["temporal"], first.address, first.ui_url, False) == (
        again.restarted, again.address, again.ui_url, again.already_running
    )
    assert again.pids["temporal"] != first.pids["temporal"]
    asyncio.run(connect_and_list())


@pytest.mark.usefixtures("fake_commands")
def test_up_after_down_brings_back_the_recorded_config_not_the_default(cluster: LocalCluster) -> None:
    """A stopped cluster started again without a config (as `iris run` and `IrisClient.connect()` do) has its
    recorded workers, address and database, not the default fleet."""
    config = ClusterConfig(worker_groups=(WorkerGroupConfig(name="tpu", count=2, cpu_millis=500, memory_bytes=10**9),))
    first = cluster.up(config, wait=False)
    cluster.down()
    second = cluster.up(None, wait=False)
    assert (["tpu-0", "tpu-1"], first.address) == (second.worker_ids, second.address)
    assert sorted(second.pids) == ["controller", "temporal", "worker-tpu-0", "worker-tpu-1"]


@pytest.mark.usefixtures("fake_commands")
def test_up_starts_only_what_is_down(cluster: LocalCluster) -> None:
    """`up` on a running cluster whose controller and one worker died starts those two, with their recorded
    command lines, and leaves the rest alone."""
    first = cluster.up(two_workers(), wait=False)
    cluster.kill_process("controller", signal.SIGKILL, wait=5.0)
    cluster.kill_process("w-1", signal.SIGKILL, wait=5.0)
    assert ["controller", "worker-w-1"] == cluster.down_components()
    mended = cluster.up(wait=False)
    assert ["controller", "worker-w-1"] == mended.restarted
    assert [] == mended.dead
    assert (first.pids["temporal"], first.pids["worker-w-0"]) == (mended.pids["temporal"], mended.pids["worker-w-0"])
    assert mended.pids["controller"] != first.pids["controller"]
    assert cluster.up(wait=False).already_running


@pytest.mark.usefixtures("fake_commands")
def test_the_supervisor_restarts_what_dies_and_down_stops_it_first(cluster: LocalCluster) -> None:
    """A supervised cluster starts a killed worker and a killed dev server again by itself; `down` then stops
    every process, the supervisor included, and nothing starts again."""

    first = cluster.up(two_workers(), wait=False, supervise=True)
    assert "supervisor" in first.pids
    cluster.kill_process("w-0", signal.SIGKILL, wait=5.0)
    cluster.kill_process("temporal", signal.SIGKILL, wait=5.0)

    def mended() -> ClusterInfo | None:
        info = cluster.status()
        return info if info is not None and not cluster.down_components(info) else None

    info = wait_until(mended, timeout=30, what="worker and server started again")
    assert first.address == info.address
    assert (info.pids["worker-w-0"], info.pids["temporal"]) != (first.pids["worker-w-0"], first.pids["temporal"])

    def restarts_logged() -> set[str] | None:
        # The supervisor logs a restart once `heal` returns, which is after the new pids are recorded.
        lines = cluster.log_path("supervisor").read_text().splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        logged = {e["component"] for e in events if e["event"] == "component_restarted"}
        return logged if {"worker-w-0", "temporal"} <= logged else None

    wait_until(restarts_logged, timeout=30, what="the supervisor logs both restarts")
    cluster.down()
    for pid in info.pids.values():
        assert not pid_alive(pid)
        assert process_group_members(pid) == []
    assert cluster.status() is None


def _listening_on(port: int) -> socket.socket | None:
    """A socket listening on `port`, or None while the port cannot be had (a killed server's sockets closing)."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's clients: TIME_WAIT
    try:
        taken.bind(("127.0.0.1", port))
        taken.listen()
    except OSError:
        taken.close()
        return None
    return taken


@pytest.mark.usefixtures("fake_commands")
def test_a_server_the_supervisor_moves_to_new_ports_takes_the_cluster_along(cluster: LocalCluster) -> None:
    """A killed dev server whose port another process took meanwhile comes back on new ports, and the controller
    and the workers are started again with the new address; the supervisor goes on (it used to stop itself with
    them, wait out its own stop's grace, kill itself, and leave the cluster down)."""
    first = cluster.up(two_workers(), wait=False, supervise=True)
    supervisor = first.pids["supervisor"]
    os.kill(supervisor, signal.SIGSTOP)  # so the port is taken before it looks
    try:
        cluster.kill_process("temporal", signal.SIGKILL, wait=5.0)
        with wait_until(lambda: _listening_on(int(first.address.rsplit(":", 1)[1])), timeout=30, what="the port"):
            os.kill(supervisor, signal.SIGCONT)

            def mended() -> ClusterInfo | None:
                info = cluster.status()
                if info is None or info.address == first.address or cluster.down_components(info):
                    return None
                restarted = all(info.pids.get(n) != first.pids[n] for n in ("controller", "worker-w-0", "worker-w-1"))
                return info if restarted else None

            info = wait_until(mended, timeout=60, what="the cluster back on a new address, restarted")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGCONT)
    assert supervisor == info.pids["supervisor"] and pid_alive(supervisor)
    assert info.address in cluster.record.read()["argv"]["controller"]


@pytest.mark.usefixtures("fake_commands")
def test_cluster_status_names_what_is_down_and_up_says_what_it_restarted(cluster: LocalCluster) -> None:
    """`iris cluster status` names a dead controller at once (no wait on a query nobody answers), and
    `iris cluster up` starts it again and says so."""
    cluster.up(two_workers(), wait=False)
    cluster.kill_process("controller", signal.SIGKILL, wait=5.0)
    env = {**os.environ, "IRIS_HOME": str(cluster.home)}
    status = subprocess.run([sys.executable, "-m", "iris", "cluster", "status"], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert 0 == status.returncode, status.stderr
    assert "down: controller" in status.stdout
    assert "Auth: none (one user, no login)" in status.stdout.splitlines()
    assert "workers: unknown (the controller does not answer" in status.stdout
    up = subprocess.run([sys.executable, "-m", "iris", "cluster", "up"], env=env, capture_output=True, text=True,
                        timeout=120)  # fmt: skip
    assert 0 == up.returncode, up.stderr
    assert "restarted: controller, supervisor" in up.stderr
    assert [] == cluster.down_components()


@pytest.mark.usefixtures("fake_commands")
def test_static_workers_are_found_and_stopped_the_way_the_local_platform_finds_its_slice_hosts(
    cluster: LocalCluster,
) -> None:
    """The cluster's workers carry the local platform's markers: `find_workers` (what LocalPlatform lists
    its slice hosts with) finds them by id; `stop_worker` stops one for good; `down` stops the rest."""
    info = cluster.up(two_workers(), wait=False)
    # a worker still in its exec has no environment to read yet: the scan sees both a moment after their start
    found = wait_until(lambda: (f if len(f := find_workers(cluster.home)) == 2 else None), timeout=10, what="both")
    assert {w: f.process.pid for w, f in found.items()} == {
        "w-0": info.pids["worker-w-0"],
        "w-1": info.pids["worker-w-1"],
    }
    assert find_workers(cluster.home.parent / "another-home") == {}

    cluster.stop_worker("w-1", wait=5.0)
    assert process_group_members(info.pids["worker-w-1"]) == []  # its `sleep` child too
    assert set(find_workers(cluster.home)) == {"w-0"}
    status = cluster.status()
    assert status is not None and "worker-w-1" not in status.pids and status.worker_ids == ["w-0"]

    cluster.down()
    assert find_workers(cluster.home) == {}
    assert process_group_members(info.pids["worker-w-0"]) == []
