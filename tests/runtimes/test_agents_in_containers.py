"""Jobs through real agents whose runtime is Docker or containerd, on a real Temporal and controller.

Two agents per engine (a two-host gang `dk`/`ct`; the fencing test adds two with a short lease),
started with `LocalCluster.start_worker` and pointed at the session's private engines; every test asks
the engine itself what is left.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.attempt_records import ends, first_worker, overlaps, spans
from benchmarks.engines import PYTHON_IMAGE
from iris import Constraint, CoschedulingConfig, IrisClient, JobFailedError, JobState, ResourceSpec
from iris.config.cluster_file import LocalWorkerSpec, Runtime
from iris.local.cluster import LocalCluster
from tests.support import Cluster, lines, wait_until
from worker_agent.runtimes.base import LABEL_JOB_ID

pytestmark = pytest.mark.e2e

GANGS = {"docker": "dk", "containerd": "ct"}


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set variables for processes spawned inside the block (worker agents inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@dataclass
class EngineFleet:
    """The cluster, a client, and how to reach one engine and its two agents."""

    cluster: Cluster
    client: IrisClient
    engine: str
    engine_env: dict[str, str]
    engine_handle: Any

    def workers(self) -> list[LocalWorkerSpec]:
        gang = GANGS[self.engine]
        attributes: list[dict[str, str | int]] = [
            {"engine": self.engine, "gang": gang, "tpu-worker-id": i} for i in range(2)
        ]
        return [
            LocalWorkerSpec(
                worker_id=f"{gang}-{i}",
                cpu_millis=2000,
                memory_bytes=2 << 30,
                runtime=Runtime(self.engine),
                attributes=dict(attrs),
                image=PYTHON_IMAGE,
            )
            for i, attrs in enumerate(attributes)
        ]

    def containers(self, job_id: str) -> list[str]:
        """Ids of the engine's containers (any state) labelled with ``job_id``."""
        if self.engine == "docker":
            import docker

            api = docker.APIClient(base_url=self.engine_handle.url, timeout=30)
            try:
                return [c["Id"] for c in api.containers(all=True, filters={"label": f"{LABEL_JOB_ID}={job_id}"})]
            finally:
                api.close()
        from worker_agent.runtimes.cri_client import CriClient

        with CriClient(str(self.engine_handle.socket)) as cri:
            return [c.id for c in cri.list_containers({LABEL_JOB_ID: job_id})]

    def submit(self, fn: Any, *args: Any, **options: Any) -> Any:
        """Submit ``fn`` to this engine's agents."""
        options.setdefault("constraints", [Constraint("engine", "EQ", self.engine)])
        return self.client.submit(fn, *args, **options)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Temporal and a controller; the engine agents are added per engine. The engines' test image (a session
    fixture) is written while the cluster starts: a second or two each, and neither needs the other."""
    home = tmp_path_factory.mktemp("iris-containers")
    local = LocalCluster(home)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(local.up, components=("temporal", "controller"))
        try:
            request.getfixturevalue("image_archive")
            info = starting.result()
            yield Cluster(local, info)
        finally:
            concurrent.futures.wait([starting])  # never `down` a cluster that is still coming up
            local.down()


@pytest.fixture(scope="module", params=list(GANGS))
def fleet(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[EngineFleet]:
    """Two agents of one engine's runtime registered with the cluster."""
    engine = request.param
    if engine == "docker":
        handle = request.getfixturevalue("dockerd")
        env = {"DOCKER_HOST": handle.url}
    else:
        handle = request.getfixturevalue("containerd")
        env = {"CONTAINERD_ADDRESS": str(handle.socket)}
    client = IrisClient.connect(cluster.info.address, store=cluster.info.store_url)
    result = EngineFleet(cluster, client, engine, env, handle)
    with _environment(**env):
        for spec in result.workers():
            cluster.local.start_worker(spec)
    wanted = {s.worker_id for s in result.workers()}
    wait_until(
        lambda: wanted <= {w.worker_id for w in client.list_workers() if w.healthy}, timeout=60, what="agents up"
    )
    yield result
    for spec in result.workers():
        cluster.local.stop_worker(spec.worker_id, wait=20)


def report_from_inside(store_dir: str) -> dict[str, str]:
    """Runs in the task's container: who it is, what cgroup it is in, whether the shared store is visible."""
    import os
    from pathlib import Path

    print("hello from the container", flush=True)
    return {
        "task_id": os.environ["IRIS_TASK_ID"],
        "num_tasks": os.environ["IRIS_NUM_TASKS"],
        "cgroup": open("/proc/self/cgroup").read(),
        "store_visible": str(Path(store_dir).exists()),
    }


def hog_memory() -> None:
    """Allocate far past a 64 MiB limit."""
    chunks = [bytearray(16 << 20) for _ in range(40)]
    print(len(chunks))


def fail_first_or_sleep() -> None:
    """Task 0 fails after a second; the others sleep until killed."""
    import os
    import time

    if os.environ["IRIS_TASK_INDEX"] == "0":
        time.sleep(1)
        raise RuntimeError("task 0 broke")
    time.sleep(300)


def sleep_long() -> None:
    import time

    print("sleeping", flush=True)
    time.sleep(300)


def test_callable_runs_in_a_container_with_its_identity(fleet: EngineFleet) -> None:
    """A shipped callable runs in the job's image: its IRIS_* identity, a container cgroup, no shared store, logs."""
    store_dir = fleet.cluster.info.store_url.removeprefix("file://")
    assert Path(store_dir).is_dir()  # on the host; the task must not see it
    job = fleet.submit(report_from_inside, store_dir, name=f"inside-{fleet.engine}", image=PYTHON_IMAGE)
    job.wait(timeout=120)
    [seen] = job.results()
    assert f"{job.job_id}/task-0" == seen["task_id"]
    assert "1" == seen["num_tasks"]
    assert ("docker" if fleet.engine == "docker" else "k8s.io") in seen["cgroup"]
    assert "False" == seen["store_visible"]
    assert "hello from the container" in fleet.client.fetch_task_logs(job.job_id, 0)
    assert [] == fleet.containers(job.job_id)


def use_the_bundle() -> str:
    import helper  # type: ignore[import-not-found]  # from the job's bundle

    return helper.greet() + " " + open("setup-output.txt").read().strip()


def test_a_callable_runs_in_its_bundle_after_setup_inside_the_container(fleet: EngineFleet, tmp_path: Path) -> None:
    """The bundle is the task's working directory in the container; the setup ran in the image first."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "helper.py").write_text("def greet():\n    return 'hello from the bundle'\n")
    setup = "/usr/local/bin/python3 -c \"import sys; print(sys.prefix)\" > setup-output.txt"
    job = fleet.submit(use_the_bundle, name=f"bundle-{fleet.engine}", bundle=project, setup=setup)
    job.wait(timeout=120)
    [seen] = job.results()
    assert seen.startswith("hello from the bundle /"), seen
    assert not (project / "setup-output.txt").exists()  # it ran on the worker's copy, not the submitter's
    assert [] == fleet.containers(job.job_id)


def test_memory_limit_kills_and_reports(fleet: EngineFleet) -> None:
    """A task over its 64 MiB request is OOM-killed; the job fails saying so."""
    job = fleet.submit(hog_memory, name=f"hog-{fleet.engine}", resources=ResourceSpec(cpu=1, memory="64m"))
    with pytest.raises(JobFailedError):
        job.wait(timeout=120)
    [task] = fleet.client.list_tasks(job.job_id)
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" == task.error
    assert [] == fleet.containers(job.job_id)


def test_gang_failure_kills_sibling_containers(fleet: EngineFleet) -> None:
    """When task 0 of a coscheduled pair fails, task 1's container is stopped and removed."""
    job = fleet.submit(
        fail_first_or_sleep, name=f"gang-{fleet.engine}", resources=ResourceSpec(cpu=1, memory="256m", replicas=2),
        coscheduling=CoschedulingConfig("gang"),
    )  # fmt: skip
    with pytest.raises(JobFailedError):
        job.wait(timeout=120)
    wait_until(lambda: not fleet.containers(job.job_id), timeout=60, what="sibling container removed")


def test_job_kill_leaves_no_container(fleet: EngineFleet) -> None:
    """`iris job kill` on a running containerized task leaves nothing in the engine."""
    job = fleet.submit(sleep_long, name=f"kill-{fleet.engine}")
    wait_until(lambda: fleet.containers(job.job_id), timeout=90, what="container started")
    wait_until(lambda: "sleeping" in fleet.client.fetch_task_logs(job.job_id, 0), timeout=60, what="task running")
    result = subprocess.run(
        [sys.executable, "-m", "iris", "job", "kill", job.job_id],
        env=fleet.cluster.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert 0 == result.returncode, result.stderr
    wait_until(lambda: not fleet.containers(job.job_id), timeout=60, what="container removed after kill")
    wait_until(lambda: job.status().state == JobState.KILLED, timeout=30, what="job reported KILLED")


def test_restarted_agent_removes_containers_it_lost(fleet: EngineFleet) -> None:
    """SIGKILL an agent under a running task: its container survives; the restarted agent removes it."""
    worker = fleet.workers()[0]
    job = fleet.submit(
        sleep_long, name=f"orphan-{fleet.engine}",
        constraints=[Constraint("engine", "EQ", fleet.engine), Constraint("tpu-worker-id", "EQ", 0)],
        max_retries_preemption=0,
    )  # fmt: skip
    wait_until(lambda: "sleeping" in fleet.client.fetch_task_logs(job.job_id, 0), timeout=90, what="task running")
    fleet.cluster.local.kill_process(worker.worker_id, signal.SIGKILL, wait=10)
    assert fleet.containers(job.job_id), "the container outlives its agent"
    with _environment(**fleet.engine_env):
        fleet.cluster.local.restart_process(worker.worker_id)
    wait_until(lambda: not fleet.containers(job.job_id), timeout=60, what="leftover container removed")
    fleet.client.terminate(job.job_id)



def serve_http_once() -> str:
    """Answer one GET on the task's named port `http` (host networking: the host's own port)."""
    import http.server
    import os

    body = f"task {os.environ['IRIS_TASK_INDEX']} coordinator {os.environ['JAX_COORDINATOR_ADDRESS']}".encode()

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.HTTPServer(("127.0.0.1", int(os.environ["IRIS_PORT_HTTP"])), Hello)
    server.timeout = 120
    server.handle_request()
    return body.decode()


def test_named_ports_of_container_tasks_are_reached_from_the_host(fleet: EngineFleet) -> None:
    """A gang in containers serves on its IRIS_PORT_HTTP; the client resolves and fetches it from outside."""
    import functools
    import urllib.request

    job = fleet.submit(
        serve_http_once, name=f"ports-{fleet.engine}", image=PYTHON_IMAGE, ports=["http"],
        resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2), coscheduling=CoschedulingConfig("gang"),
    )  # fmt: skip
    addresses = wait_until(lambda: (a if len(a := fleet.client.resolve(job.job_id, "http")) == 2 else None),
                           timeout=120)  # fmt: skip

    def fetch(address: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://{address}/", timeout=5) as reply:
                return str(reply.read().decode())
        except OSError:
            return None

    # Read while both tasks wait for their one request: a task that answered ends, and its endpoints with it.
    coordinator = fleet.client.endpoints(job.job_id)["jax-coordinator"][0]
    bodies = [wait_until(functools.partial(fetch, a), timeout=60, what=f"an answer from {a}") for a in addresses]
    assert [f"task {i} coordinator {coordinator}" for i in range(2)] == bodies
    assert JobState.SUCCEEDED == job.wait(timeout=120).state
    assert [] == fleet.client.resolve(job.job_id, "http")


LEASE = 3.0  # the fenced agents' lease: the watchdog kills a frozen agent's container this long after a renewal
MARGIN = 1.5
HEARTBEAT = 4.5  # their --heartbeat-timeout: the server gives the attempt up this long after its last heartbeat
FROZEN = 2 * LEASE  # how long the agent stays stopped: past its lease and past the heartbeat timeout
assert LEASE < HEARTBEAT < FROZEN  # the container dies while the agent is frozen; the task is lost before it wakes


def record_over_tcp(port: int, first_seconds: float) -> None:
    """Send `task attempt worker what time` records to the test's collector while running: the first attempt
    runs `first_seconds`, any later one 2 s (host networking: the collector is the host's loopback)."""
    import os
    import socket
    import time

    task, attempt, worker = os.environ["IRIS_TASK_ID"], os.environ["IRIS_ATTEMPT"], os.environ["IRIS_WORKER_ID"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as peer:

        def record(what: str) -> None:
            peer.sendall(f"{task} {attempt} {worker} {what} {time.time():.3f}\n".encode())

        record("start")
        until = time.monotonic() + (first_seconds if attempt == "0" else 2.0)
        while time.monotonic() < until:
            time.sleep(0.1)
            record("alive")
        record("end")


@contextlib.contextmanager
def _collector(path: Path) -> Iterator[int]:
    """A TCP server on loopback appending every line it receives to `path`; its port."""
    import socketserver
    import threading

    lock = threading.Lock()

    class Append(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                with lock, path.open("ab") as out:
                    out.write(line)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Append) as server:
        server.daemon_threads = True
        # shutdown() waits for serve_forever's next look at its flag: every 0.5 s by default, a test's last 0.5 s
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()


def test_a_frozen_agents_container_dies_with_its_lease_before_it_runs_elsewhere(
    fleet: EngineFleet, tmp_path: Path
) -> None:
    """An agent of this engine SIGSTOPped for 2x its lease (its container left running): the lease watchdog
    kills the container while the agent is still frozen, the task runs again on the other agent only after,
    recorded as a preemption saying the lease expired, and it ends exactly once."""
    specs = [
        LocalWorkerSpec(worker_id=f"fence-{GANGS[fleet.engine]}-{i}", cpu_millis=1000, memory_bytes=1 << 30,
                        runtime=Runtime(fleet.engine), attributes={"fence": fleet.engine}, image=PYTHON_IMAGE)
        for i in range(2)
    ]  # fmt: skip
    lease = {"IRIS_LEASE_SECONDS": str(LEASE), "IRIS_LEASE_MARGIN_SECONDS": str(MARGIN),
             "IRIS_HEARTBEAT_TIMEOUT_SECONDS": str(HEARTBEAT)}
    with _environment(**fleet.engine_env, **lease):
        for spec in specs:
            fleet.cluster.local.start_worker(spec)
    records = tmp_path / "records"
    stopped_at: float | None = None
    victim = ""
    try:
        wanted = {s.worker_id for s in specs}
        wait_until(lambda: wanted <= {w.worker_id for w in fleet.client.list_workers() if w.healthy}, timeout=60,
                   what="fenced agents up")  # fmt: skip
        with _collector(records) as port:
            job = fleet.submit(record_over_tcp, port, 120.0, name=f"fenced-{fleet.engine}",
                               resources=ResourceSpec(cpu=1, memory="256m"),
                               constraints=[Constraint("fence", "EQ", fleet.engine)])  # fmt: skip
            wait_until(lambda: len(lines(records)) >= 3, timeout=120, what="attempt 0 running")
            victim = first_worker(records, "task-0")
            assert fleet.cluster.local.kill_process(victim, signal.SIGSTOP)
            stopped_at = time.time()
            seen = wait_until(lambda: (t if "lease expired" in (t := job.status().tasks[0]).error else None),
                              timeout=60, interval=0.2, what="lease expiry")  # fmt: skip
            assert seen.error.startswith("lease expired: the worker stopped renewing it")
            time.sleep(max(0.0, stopped_at + FROZEN - time.time()))  # frozen for FROZEN in all
            fleet.cluster.local.kill_process(victim, signal.SIGCONT)
            final = job.wait(timeout=120)
        task_spans = spans(records)[f"{job.job_id}/task-0"]
        killed = task_spans["0"][1] - stopped_at
        print(f"\n{fleet.engine}: agent SIGSTOP -> container killed {killed:.1f} s later (lease {LEASE:g} s); "
              f"attempt 1 started {task_spans['1'][0] - stopped_at:.1f} s later")  # fmt: skip
        assert JobState.SUCCEEDED == final.state
        assert {victim, final.tasks[0].worker_id} == wanted and 1 == final.tasks[0].attempt
        assert (1, 0) == (final.tasks[0].preemption_count, final.tasks[0].failure_count)
        assert killed < LEASE + 2.0  # by its lease, while the agent was still frozen
        assert [] == overlaps(records)
        assert {f"{job.job_id}/task-0": 1} == ends(records)
        wait_until(lambda: not fleet.containers(job.job_id), timeout=60, what="the fenced container removed")
    finally:
        if victim:
            fleet.cluster.local.kill_process(victim, signal.SIGCONT)
        for spec in specs:
            fleet.cluster.local.stop_worker(spec.worker_id, wait=20)
