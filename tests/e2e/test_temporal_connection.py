"""Reaching a team's Temporal: mutual TLS through a real TLS terminator, and `iris temporal setup`.

The relay (tests/tls_relay.py) requires a client certificate signed by the test CA and forwards
to the session's dev server, so everything behind it is the real control plane.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.contracts import SEARCH_ATTRIBUTES
from iris import Constraint, IrisClient, JobState, ResourceSpec
from iris.connection import TemporalSettings
from tests.support import Cluster
from tests.tls_relay import Pki, TlsRelay, make_pki
from workflows.visibility import JOB_USER

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def relay(pki: Pki, cluster: Cluster) -> Iterator[TlsRelay]:
    host, port = cluster.info.address.rsplit(":", 1)
    with TlsRelay(pki, host, int(port)).running() as relay:
        yield relay


def tls_env(cluster: Cluster, relay: TlsRelay, pki: Pki, **extra: str) -> dict[str, str]:
    """The environment of an `iris` command that reaches Temporal only through the mTLS relay."""
    env = cluster.env
    env.update(
        IRIS_TEMPORAL_ADDRESS=f"127.0.0.1:{relay.port}",
        IRIS_TEMPORAL_TLS_CA=str(pki.ca),
        IRIS_TEMPORAL_TLS_CERT=str(pki.client_cert),
        IRIS_TEMPORAL_TLS_KEY=str(pki.client_key),
        **extra,
    )
    return env


@pytest.mark.parametrize("client_cert", ["none", "stranger"])
async def test_client_without_a_valid_certificate_is_refused(relay: TlsRelay, pki: Pki, client_cert: str) -> None:
    """No client certificate, or one from a CA the server does not trust: the connection is refused."""
    files = {"none": {}, "stranger": {"tls_cert": pki.other_client_cert, "tls_key": pki.other_client_key}}
    settings = TemporalSettings.load(address=f"127.0.0.1:{relay.port}", tls_ca=pki.ca, **files[client_cert])
    relayed_before = relay.relayed
    with pytest.raises(RuntimeError):
        await settings.connect()
    assert relayed_before == relay.relayed  # refused in the handshake: nothing reached Temporal


def test_iris_run_over_mutual_tls_submits_waits_and_records_the_certificate_subject(
    cluster: Cluster, relay: TlsRelay, pki: Pki
) -> None:
    """`iris run` with IRIS_TEMPORAL_TLS_* submits through the relay, streams logs, exits 0; IrisUser is the cert CN."""
    name = f"tls-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "-m", "iris", "run", "--name", name, "--cpu", "0.1", "--memory", "64m",
         "--", "python", "-c", "print('over mutual tls')"],
        env=tls_env(cluster, relay, pki, USER="not-the-submitter"), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert 0 == done.returncode, done.stderr
    assert "[0] over mutual tls" in done.stdout
    job_id = next(w for w in done.stderr.split() if w.startswith(name))

    async def user_attribute() -> str | None:
        client = await Client.connect(cluster.info.address)
        desc = await client.get_workflow_handle(job_id).describe()
        return desc.typed_search_attributes.get(JOB_USER)

    import asyncio

    assert "alice@example.com" == asyncio.run(user_attribute())


def test_temporal_setup_creates_a_namespace_and_search_attributes_once(
    cluster: Cluster, relay: TlsRelay, pki: Pki
) -> None:
    """`iris temporal setup` over mTLS creates what is missing, says so, and a second run finds it all there."""
    namespace = f"iris-setup-{uuid.uuid4().hex[:6]}"
    env = tls_env(cluster, relay, pki, IRIS_TEMPORAL_NAMESPACE=namespace)
    argv = [sys.executable, "-m", "iris", "temporal", "setup"]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert 0 == first.returncode, first.stderr
    assert f"namespace {namespace}: created" in first.stdout
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert f"search attribute {name} ({kind}): created" in first.stdout
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert 0 == second.returncode, second.stderr
    assert f"namespace {namespace}: exists" in second.stdout
    assert "created" not in second.stdout
    assert len(SEARCH_ATTRIBUTES) == second.stdout.count(": exists") - 1


def test_bad_connection_settings_are_one_line_errors(cluster: Cluster, tmp_path: Path) -> None:
    """A client certificate without its key is refused before connecting, naming the variable, no traceback."""
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate")
    env = {**cluster.env, "IRIS_TEMPORAL_TLS_CERT": str(cert)}
    done = subprocess.run([sys.executable, "-m", "iris", "job", "list"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert 0 != done.returncode
    assert "IRIS_TEMPORAL_TLS_KEY" in done.stderr
    assert "Traceback" not in done.stderr


def _getenv(name: str) -> str | None:
    """The task's own environment variable (a bound `os.environ.get` would ship the submitter's environment)."""
    import os

    return os.environ.get(name)


def _child_over_tls() -> dict[str, object]:
    """A task on the mTLS worker: submits a child with `IrisClient.connect()` and reports what it was given."""
    import os

    from iris import IrisClient, ResourceSpec
    with IrisClient.connect() as client:
        child = client.submit(_getenv, "IRIS_PARENT_JOB_ID", name="tls-child",
                              resources=ResourceSpec(cpu=0.25, memory="128m"))
        child.wait(timeout=120)
        seen = {k: os.environ.get(k, "") for k in ("IRIS_TEMPORAL_ADDRESS", "IRIS_TEMPORAL_TLS_CERT")}
        return {"child": child.results()[0], **seen}


def test_a_task_on_a_mutual_tls_worker_submits_a_child_through_the_same_connection(
    cluster: Cluster, relay: TlsRelay, pki: Pki, client: IrisClient
) -> None:
    """A worker that reaches Temporal only through the mTLS relay gives its tasks the relay's address and the
    certificate files by path: a task's `IrisClient.connect()` submits a child through the relay, and it runs."""
    from tests.support import forget_workers, wait_until

    worker_id = f"tls-worker-{uuid.uuid4().hex[:6]}"
    agent = subprocess.Popen(
        [sys.executable, "-m", "iris", "worker", "serve", "--worker-id", worker_id, "--cpu", "1", "--memory", "1g",
         "--attribute", f"role={worker_id}", "--task-user", ""],
        env=tls_env(cluster, relay, pki), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: any(w.worker_id == worker_id and w.healthy for w in client.list_workers()), timeout=60,
                   what="the mTLS worker registered")
        job = client.submit(_child_over_tls, name="tls-parent", resources=ResourceSpec(cpu=0.25, memory="256m"),
                            constraints=[Constraint("role", "EQ", worker_id)])
        status = job.wait(timeout=180, raise_on_failure=False)
        assert JobState.SUCCEEDED == status.state, "\n".join(job.logs()[-20:])
        seen = job.results()[0]
        assert job.job_id == seen["child"]  # the child ran (on the same worker: it inherits the constraint)
        assert f"127.0.0.1:{relay.port}" == seen["IRIS_TEMPORAL_ADDRESS"]
        assert str(pki.client_cert.resolve()) == seen["IRIS_TEMPORAL_TLS_CERT"]
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        forget_workers(cluster, [worker_id])
