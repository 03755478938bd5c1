"""Encryption that holds, on a local cluster started with `iris cluster up` and a codec key.

A callable and a command carrying secrets run and return the right results; no secret is in the
histories (read without the key), the dev server's database files or the store's files; a worker
with another key refuses to start, naming both key ids, while jobs keep running; signals the
scheduler cannot read (another key, garbage) are dropped and recorded and scheduling goes on; the
codec server decrypts for an authenticated key holder only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client

from activities.contracts import SCHEDULER_WORKFLOW_ID
from iris import IrisClient, JobFailedError, JobState
from iris.local.cluster import LocalCluster
from iris.security.codec import ENCODING, EncryptionCodec, data_converter, generate_key, load_key
from tests.deploy.conftest import free_port, get
from tests.support import TEMPORAL, wait_until

pytestmark = pytest.mark.e2e

SECRET = "s3cr3t-token-value-4711"
FLEET = "local:\n  worker_groups:\n    - {name: cpu, count: 1, resources: {cpu: 2, memory: 2g}}\n"


@dataclass
class KeyedCluster:
    home: Path
    key: str
    env: dict[str, str]
    address: str
    store: Path

    def iris(self, *args: str, timeout: float = 180, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "iris", *args], env={**self.env, **extra},
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    @property
    def key_id(self) -> str:
        key = load_key({"IRIS_CODEC_KEY": self.key})
        assert key is not None
        return EncryptionCodec(key).key_id


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedCluster]:
    """`iris cluster up` in a fresh IRIS_HOME, every process holding one codec key; `iris cluster down` after."""
    home = tmp_path_factory.mktemp("iris-keyed")
    (home / "fleet.yaml").write_text(FLEET)
    key = generate_key()
    source_root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_TEMPORAL_", "IRIS_STORE", "IRIS_CODEC"))}
    env.update(IRIS_HOME=str(home), IRIS_CODEC_KEY=key, PYTHONPATH=source_root, PYTHONUNBUFFERED="1")
    up = subprocess.run([sys.executable, "-m", "iris", "cluster", "up", "--config", str(home / "fleet.yaml")],
                        env=env, capture_output=True, text=True, timeout=180)  # fmt: skip
    try:
        assert 0 == up.returncode, up.stderr
        info = LocalCluster(home).status()
        assert info is not None and info.running
        yield KeyedCluster(home, key, env, info.address, home / "store")
    finally:
        subprocess.run([sys.executable, "-m", "iris", "cluster", "down"], env=env, capture_output=True, timeout=120)


def reverse(text: str) -> str:
    """The task: its result is derived from the secret it was given."""
    return text[::-1]


def refuse(text: str) -> None:
    """A task whose failure message holds the secret."""
    raise ValueError(f"bad token {text}")


async def _histories(address: str) -> list[bytes]:
    """Every workflow history in the namespace, as raw bytes, read by a client that has no key."""
    client = await Client.connect(address)
    found = []
    async for wf in client.list_workflows():
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        found.append(History(events=history.events).SerializeToString())
    return found


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and any(n in p.read_bytes() for n in needles)]  # fmt: skip


def test_a_callable_and_a_command_with_secrets_run_and_leave_no_plaintext(
    keyed: KeyedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`IrisClient.connect()` and `iris run` on the keyed cluster: right results (a failure's message too); the
    secret is in no history, no dev server database file and no store file; the blobs name the key."""
    for name, value in keyed.env.items():
        if name.startswith("IRIS_"):
            monkeypatch.setenv(name, value)
    with IrisClient.connect() as client:
        job = client.submit(reverse, SECRET, name="encrypted-callable")
        assert JobState.SUCCEEDED == job.wait(timeout=120).state
        assert [SECRET[::-1]] == job.results()
        failing = client.submit(refuse, SECRET, name="encrypted-failure")
        with pytest.raises(JobFailedError) as failed:
            failing.wait(timeout=120)
        assert f"ValueError: bad token {SECRET}" in str(failed.value)  # the key holder reads the error

    run = keyed.iris("run", "--name", "encrypted-command", "-e", f"SECRET_TOKEN={SECRET}", "--",
                     "sh", "-c", f'test "$SECRET_TOKEN" = {SECRET} && echo secret-ok')  # fmt: skip
    assert 0 == run.returncode, run.stderr
    assert "secret-ok" in run.stdout

    needles = [SECRET.encode(), SECRET[::-1].encode()]
    recorded = asyncio.run(_histories(keyed.address))
    assert len(recorded) >= 5  # scheduler, autoscaler, worker, two jobs and their tasks
    assert [] == [h for h in recorded if any(n in h for n in needles)]
    assert any(ENCODING in h for h in recorded)
    databases = [p for p in keyed.home.iterdir() if p.name.startswith("temporal.db")]
    assert databases
    assert [] == [str(p) for p in databases if any(n in p.read_bytes() for n in needles)]
    # Task logs are not encrypted (docs/operators.md): the failing task's traceback is there, nothing else is.
    assert ["logs"] == sorted({Path(p).parts[0] for p in _files_holding(keyed.store, needles)})
    function_blobs = [p for p in keyed.store.rglob("function") if p.is_file()]
    assert function_blobs
    assert all(keyed.key_id.encode() in p.read_bytes()[:64] for p in function_blobs)


def test_a_worker_with_another_key_refuses_to_start_and_jobs_keep_running(keyed: KeyedCluster) -> None:
    """`iris worker serve` with another key exits at once naming both key ids; nothing reached the scheduler."""
    other = generate_key()
    other_key = load_key({"IRIS_CODEC_KEY": other})
    assert other_key is not None
    worker = keyed.iris("worker", "serve", "--worker-id", "wrong-key", "--temporal", keyed.address,
                        "--store", keyed.store.as_uri(), "--cpu", "1", "--memory", "1g", "--task-user", "",
                        timeout=120, IRIS_CODEC_KEY=other)  # fmt: skip
    expected = (f"worker wrong-key refuses to start: the cluster's payloads are encrypted with key {keyed.key_id}, "
                f"but this process holds key {EncryptionCodec(other_key).key_id}")  # fmt: skip
    assert 3 == worker.returncode
    assert expected in worker.stderr and "Traceback" not in worker.stderr

    run = keyed.iris("run", "--name", "after-wrong-key", "--", "echo", "still-running")
    assert 0 == run.returncode, run.stderr
    assert "still-running" in run.stdout
    listed = keyed.iris("worker", "list")
    assert "wrong-key" not in listed.stdout


def test_unreadable_signals_to_the_scheduler_are_dropped_and_scheduling_goes_on(keyed: KeyedCluster) -> None:
    """A plain client's garbage and another key's registration reach the scheduler; both are dropped with a
    line in the controller's log, and the next job runs."""
    other_key = load_key({"IRIS_CODEC_KEY": generate_key()})

    async def send() -> None:
        plain = await Client.connect(keyed.address)
        await plain.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal("register_workers", "not a batch")
        await plain.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal("enqueue", {"job_id": 7})
        other = await Client.connect(keyed.address, data_converter=data_converter(other_key))
        await other.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal("release_batch", [])

    asyncio.run(send())
    run = keyed.iris("run", "--name", "after-garbage", "--", "echo", "scheduled")
    assert 0 == run.returncode, run.stderr
    assert "scheduled" in run.stdout

    log = keyed.home / "logs" / "controller.log"
    def drops_of_each() -> list[dict[str, str]] | None:
        """The drops logged, once each of the three signals' is there (a count could end on a repeated one)."""
        found = [json.loads(line) for line in log.read_text().splitlines() if '"payload_dropped"' in line]
        return found if {"register_workers", "enqueue", "release_batch"} <= {d["signal"] for d in found} else None

    drops = wait_until(drops_of_each, timeout=30, what="a drop of each signal logged")
    assert any(keyed.key_id in d["reason"] for d in drops if d["signal"] == "release_batch")


def _post(url: str, body: dict[str, object], token: str | None) -> tuple[int, dict[str, object]]:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_codec_server_decrypts_a_job_input_for_an_authenticated_key_holder(keyed: KeyedCluster) -> None:
    """`iris codec-server` with a token: the right token gets the plaintext of a job's input, no token gets 401;
    `temporal workflow show --codec-endpoint` shows the plaintext only with `--codec-auth "Bearer <token>"`."""
    job_id = keyed.iris("run", "--no-wait", "--name", "for-codec", "-e", f"S={SECRET}", "--", "true").stdout.split()[-1]

    async def job_input() -> dict[str, object]:
        plain = await Client.connect(keyed.address)
        history = await plain.get_workflow_handle(job_id).fetch_history()
        payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
        return {"metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
                "data": base64.b64encode(payload.data).decode()}  # fmt: skip

    encrypted = asyncio.run(job_input())
    port, token = free_port(), "codec-token-for-the-test-0001"
    server = subprocess.Popen([sys.executable, "-m", "iris", "codec-server", "--port", str(port)],
                              env={**keyed.env, "IRIS_CODEC_SERVER_TOKEN": token}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=60, what="codec server up")
        assert 401 == _post(f"http://127.0.0.1:{port}/decode", {"payloads": [encrypted]}, None)[0]
        code, decoded = _post(f"http://127.0.0.1:{port}/decode", {"payloads": [encrypted]}, token)
        assert 200 == code
        payloads = decoded["payloads"]
        assert isinstance(payloads, list)
        assert SECRET.encode() in base64.b64decode(payloads[0]["data"])

        def show(*auth: str) -> subprocess.CompletedProcess[str]:  # Temporal's own CLI, as a key holder uses it
            return subprocess.run([str(TEMPORAL), "workflow", "show", "-w", job_id, "--address", keyed.address,
                                   "--output", "json", "--codec-endpoint", f"http://127.0.0.1:{port}", *auth],
                                  capture_output=True, text=True, timeout=60)  # fmt: skip

        def job_request(shown: subprocess.CompletedProcess[str]) -> bytes:
            started = json.loads(shown.stdout)["events"][0]["workflowExecutionStartedEventAttributes"]
            return base64.b64decode(started["input"]["payloads"][0]["data"])

        began = time.monotonic()
        assert SECRET.encode() in job_request(show("--codec-auth", f"Bearer {token}"))
        shown_in = time.monotonic() - began
        # No token: the codec server answers 401 and nothing is decrypted. The CLI retries the history's
        # decoding until its own 10 s deadline; it is given a shorter one here, still several times what the
        # whole show took with the token (so a plaintext it was wrongly given would be printed within it).
        refused = show("--command-timeout", f"{max(3.0, 5 * shown_in):.1f}s")
        assert SECRET not in refused.stdout + refused.stderr
        # Nor in the input it printed, decoded (the JSON carries payloads in base64: a decrypted one reads as above).
        assert not refused.stdout.strip() or SECRET.encode() not in job_request(refused)
    finally:
        server.terminate()
        server.wait(30)


def _getenv(name: str) -> str | None:
    """The task's own environment variable (a bound `os.environ.get` would ship the submitter's environment)."""
    return os.environ.get(name)


def _secret_of_child() -> dict[str, object]:
    """A task that submits a child on its own (encrypted) cluster; what it and the child saw."""
    from iris import IrisClient
    with IrisClient.connect() as client:
        child = client.submit(_getenv, "SECRET_TOKEN", name="child")
        child.wait(timeout=120)
        return {"child": child.results()[0], "inline_key": "IRIS_CODEC_KEY" in os.environ,
                "key_file": os.environ.get("IRIS_CODEC_KEY_FILE", "")}


def test_a_task_on_an_encrypted_cluster_submits_a_child_with_the_key_by_reference(
    keyed: KeyedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task reaches its encrypted cluster with `IrisClient.connect()`: the key comes as a file path, never
    inline; its child inherits the parent's env (read from the parent's encrypted history) and runs."""
    for name, value in keyed.env.items():
        if name.startswith("IRIS_"):
            monkeypatch.setenv(name, value)
    with IrisClient.connect() as client:
        job = client.submit(_secret_of_child, name="encrypted-parent", env={"SECRET_TOKEN": SECRET})
        assert JobState.SUCCEEDED == job.wait(timeout=240).state
        seen = job.results()[0]
    assert SECRET == seen["child"]
    assert not seen["inline_key"]
    assert keyed.key == Path(str(seen["key_file"])).read_text()
