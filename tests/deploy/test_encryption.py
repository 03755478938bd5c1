"""Payload encryption: an encrypted job's histories hold no plaintext input, and the job still runs and reads back."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client

from iris import IrisClient, JobState
from iris.codec import ENCODING, generate_key
from tests.deploy.conftest import Deployment, free_port, get
from tests.support import wait_until

pytestmark = pytest.mark.e2e

SECRET = "s3cr3t-token-value-4711"


async def histories(address: str) -> list[bytes]:
    """Every workflow history in the namespace, as raw bytes, read by a client that has no key."""
    client = await Client.connect(address)
    found = []
    async for wf in client.list_workflows():
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        found.append(History(events=history.events).SerializeToString())
    return found


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_encrypted_job_runs_reads_back_and_leaves_no_plaintext_in_history(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With IRIS_CODEC_KEY everywhere: the job runs with its env, its status reads back, histories are ciphertext;
    `iris codec-server` decrypts for a key holder and does not start without the key."""
    key = generate_key()
    monkeypatch.setenv("IRIS_CODEC_KEY", key)
    d = deployment.daemons
    d.extra_env["IRIS_CODEC_KEY"] = key
    d.controller("controller")
    d.worker("w1")
    client = IrisClient.connect(deployment.info.address, store=deployment.info.store_url)
    job = client.submit_command(["sh", "-c", 'test "$SECRET_TOKEN" = ' + SECRET + " && echo secret-ok"],
                                name="encrypted", env={"SECRET_TOKEN": SECRET})
    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert ["secret-ok"] == job.logs(0)
    assert (JobState.SUCCEEDED, 1) == (job.status().state, len(client.list_tasks(job.job_id)))

    recorded = asyncio.run(histories(deployment.info.address))
    assert len(recorded) >= 3  # scheduler, worker, job, task
    assert all(SECRET.encode() not in h for h in recorded)
    assert any(ENCODING in h for h in recorded)

    async def job_input() -> dict[str, object]:
        plain = await Client.connect(deployment.info.address)
        history = await plain.get_workflow_handle(job.job_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        payload = started.input.payloads[0]
        return {"metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
                "data": base64.b64encode(payload.data).decode()}

    encrypted = asyncio.run(job_input())
    port = free_port()
    d.start_plain("codec", [sys.executable, "-m", "iris", "codec-server", "--port", str(port)], IRIS_CODEC_KEY=key)
    wait_until(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=60, what="codec server up")
    code, decoded = post(f"http://127.0.0.1:{port}/decode", {"payloads": [encrypted]})
    assert 200 == code
    payloads = decoded["payloads"]
    assert isinstance(payloads, list)
    assert SECRET.encode() in base64.b64decode(payloads[0]["data"])

    keyless = subprocess.run([sys.executable, "-m", "iris", "codec-server", "--port", str(free_port())],
                             env={k: v for k, v in d.env().items() if not k.startswith("IRIS_CODEC")},
                             capture_output=True, text=True, timeout=60)
    assert 0 != keyless.returncode
    assert "IRIS_CODEC_KEY" in keyless.stderr and "Traceback" not in keyless.stderr
