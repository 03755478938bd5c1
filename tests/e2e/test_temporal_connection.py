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
