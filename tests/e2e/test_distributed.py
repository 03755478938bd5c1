"""Distributed programs on the real local cluster: the coordinator environment, named ports, endpoints."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import pytest

from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec
from tests.support import Cluster, wait_until

SMALL = ResourceSpec(cpu=0.5, memory="256m")
DISTRIBUTED_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "TPU_WORKER_HOSTNAMES",
                    "TPU_WORKER_ID", "IRIS_TASK_INDEX")  # fmt: skip


def rendezvous() -> dict[str, object]:
    """A stand-in for `jax.distributed.initialize()`: task 0 listens on the coordinator, the others dial it."""
    import os
    import socket
    import time

    env = os.environ
    host, port = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
    me, count = int(env["JAX_PROCESS_ID"]), int(env["JAX_NUM_PROCESSES"])
    heard: list[int] = []
    if me == 0:
        with socket.create_server((host, int(port))) as server:
            server.settimeout(60)
            for _ in range(count - 1):
                conn, _ = server.accept()
                with conn:
                    heard.append(int(conn.recv(16).decode()))
                    conn.sendall(b"0")
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            conn.sendall(str(me).encode())
            heard.append(int(conn.recv(16).decode()))
    return {**{k: env.get(k) for k in DISTRIBUTED_VARS}, "heard": sorted(heard)}


def test_coscheduled_tasks_meet_at_the_coordinator_and_know_their_slice(client: IrisClient) -> None:
    """A 4-host gang: every task reaches task 0's coordinator port and sees its place in the slice."""
    job = client.submit(
        rendezvous,
        resources=ResourceSpec(cpu=0.5, memory="256m", replicas=4),
        constraints=[Constraint("tpu-name", "EQ", "slice-a")],
        coscheduling=CoschedulingConfig(group_by="tpu-name"),
    )
    assert JobState.SUCCEEDED == job.wait(timeout=120).state
    results = job.results()
    host_index = {w.worker_id: w.attributes.get("tpu-worker-id") for w in client.list_workers()}
    placed = {t.task_index: t.worker_id for t in client.list_tasks(job.job_id)}
    coordinator = results[0]["JAX_COORDINATOR_ADDRESS"]
    assert isinstance(coordinator, str) and coordinator.startswith("127.0.0.1:")
    assert [1, 2, 3] == results[0]["heard"]
    for i, r in enumerate(results):
        assert coordinator == r["JAX_COORDINATOR_ADDRESS"]
        assert (str(i), "4") == (r["JAX_PROCESS_ID"], r["JAX_NUM_PROCESSES"])
        assert str(host_index[placed[i]]) == r["TPU_WORKER_ID"]
        assert ",".join(["127.0.0.1"] * 4) == r["TPU_WORKER_HOSTNAMES"]
    assert [[1, 2, 3], [0], [0], [0]] == [r["heard"] for r in results]


SERVE_ONCE = """
import http.server, os, sys
index, attempt = os.environ["IRIS_TASK_INDEX"], os.environ["IRIS_ATTEMPT"]
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"task {index} attempt {attempt}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.HTTPServer(("127.0.0.1", int(os.environ["IRIS_PORT_HTTP"])), Hello)
server.timeout = 120
server.handle_request()
sys.exit(int(os.environ.get("FAIL_FIRST", "0")) if attempt == "0" else 0)
"""


def fetch(address: str, timeout: float = 30.0) -> str:
    """The body of GET http://address/, retried while the task's server is not listening yet."""

    def get() -> str | None:
        try:
            with urllib.request.urlopen(f"http://{address}/", timeout=5) as reply:
                return str(reply.read().decode())
        except OSError:
            return None

    return wait_until(get, timeout=timeout, what=f"an answer from {address}")


def test_named_port_is_an_endpoint_while_its_task_runs(client: IrisClient, cluster: Cluster) -> None:
    """Each task serves HTTP on IRIS_PORT_HTTP; the client resolves and fetches both; the ended job resolves to []."""
    job = client.submit_command([sys.executable, "-c", SERVE_ONCE], resources=ResourceSpec(
        cpu=0.5, memory="256m", replicas=2), ports=["http"])  # fmt: skip
    addresses = wait_until(lambda: (a if len(a := client.resolve(job.job_id, "http")) == 2 else None), timeout=60)
    assert len(set(addresses)) == 2 and all(a.startswith("127.0.0.1:") for a in addresses)
    listed = subprocess.run([sys.executable, "-m", "iris", "job", "endpoints", job.job_id], env=cluster.env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert 0 == listed.returncode, listed.stderr
    assert all(a in listed.stdout for a in addresses)
    assert ["task 0 attempt 0", "task 1 attempt 0"] == [fetch(a) for a in addresses]
    assert JobState.SUCCEEDED == job.wait(timeout=60).state
    assert [] == client.resolve(job.job_id, "http")


def test_restarted_task_publishes_its_new_address(client: IrisClient) -> None:
    """A task that fails after serving once is retried on a fresh port, and resolve follows it."""
    job = client.submit_command([sys.executable, "-c", SERVE_ONCE], resources=SMALL, ports=["http"],
                                env={"FAIL_FIRST": "1"}, max_retries_failure=1)  # fmt: skip
    (first,) = wait_until(lambda: client.resolve(job.job_id, "http"), timeout=60)
    assert "task 0 attempt 0" == fetch(first)
    (second,) = wait_until(lambda: [a for a in client.resolve(job.job_id, "http") if a != first], timeout=60)
    assert "task 0 attempt 1" == fetch(second)
    assert JobState.SUCCEEDED == job.wait(timeout=60).state
    assert [] == client.resolve(job.job_id, "http")


def test_bad_port_name_is_refused_at_submit(client: IrisClient) -> None:
    """A port name that cannot become IRIS_PORT_<NAME> is a ValueError naming the field; nothing starts."""
    before = len(client.list_jobs())
    with pytest.raises(ValueError, match=r"^ports: 'my-port'"):
        client.submit_command(["true"], resources=SMALL, ports=["my-port"])
    assert before == len(client.list_jobs())


def test_retried_gang_gets_a_fresh_coordinator_address(client: IrisClient) -> None:
    """Task 1 fails the gang's first attempt; the whole gang runs again with another coordinator port."""
    script = ('import os, sys; print("coordinator", os.environ["IRIS_ATTEMPT"], os.environ["JAX_COORDINATOR_ADDRESS"]);'
              ' sys.exit(1 if os.environ["IRIS_ATTEMPT"] == "0" and os.environ["IRIS_TASK_INDEX"] == "1" else 0)')
    job = client.submit_command(
        [sys.executable, "-c", script], resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2),
        constraints=[Constraint("tpu-name", "EQ", "slice-a")], coscheduling=CoschedulingConfig(group_by="tpu-name"),
        max_retries_failure=1,
    )  # fmt: skip
    assert JobState.SUCCEEDED == job.wait(timeout=120).state
    seen: dict[str, set[str]] = {}
    for index in (0, 1):
        for line in client.fetch_task_logs(job.job_id, index):
            if line.startswith("coordinator "):
                _, attempt, address = line.split()
                seen.setdefault(attempt, set()).add(address)
    assert {"0", "1"} == set(seen)
    assert 1 == len(seen["0"]) == len(seen["1"])  # each attempt's tasks agree on one coordinator
    assert seen["0"] != seen["1"]
