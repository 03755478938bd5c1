"""The Iris images, built with `iris build` on a private dockerd from an offline base, start and answer /health."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.engines import EngineUnavailable, PrivateDockerd
from tests.deploy.base_image import BASE_IMAGE, write_base_image
from tests.deploy.conftest import Deployment, free_port, health
from tests.support import missing_engine, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]  # `iris build` alone may take 10 minutes
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateDockerd]:
    """A private dockerd holding the offline base image."""
    engine = PrivateDockerd()
    try:
        engine.start()
        engine.load(write_base_image(tmp_path_factory.mktemp("base") / "base.tar"))
    except EngineUnavailable as exc:
        engine.stop()
        missing_engine(f"dockerd: {exc}")
    try:
        yield engine
    finally:
        engine.stop()


def run(engine: PrivateDockerd, image: str, args: list[str], store: Path) -> Any:
    import docker

    client = docker.DockerClient(base_url=engine.url, timeout=60)
    return client.containers.run(
        image, args, detach=True, network_mode="host", volumes={str(store): {"bind": "/store", "mode": "rw"}},
        environment={"IRIS_HEALTH_HOST": "127.0.0.1"},  # host network: keep the probe port on loopback
    )


def test_iris_build_makes_images_that_start_and_answer_health(dockerd: PrivateDockerd, deployment: Deployment) -> None:
    """`iris build` builds the three images; controller and worker containers serve /health 200; the task image
    has what the task runner needs."""
    done = subprocess.run(
        [sys.executable, "-m", "iris", "build", "--context", str(ROOT), "--docker-host", dockerd.url, "--tag", "test",
         "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "--build-arg", "PIP_INSTALL=true"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert 0 == done.returncode, done.stderr[-3000:]
    built = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("built ")]
    assert ["iris-controller:test", "iris-worker:test", "iris-task:test"] == built

    store = deployment.local.home / "store"
    address = deployment.info.address
    common = ["--temporal", address, "--store", "file:///store"]
    controller_port, worker_port = free_port(), free_port()
    containers = [
        run(dockerd, "iris-controller:test", ["controller", "serve", *common, "--health-port", str(controller_port)],
            store),
        run(dockerd, "iris-worker:test", ["worker", "serve", *common, "--worker-id", "boxed", "--cpu", "1",
                                          "--memory", "1g", "--task-user", "", "--health-port", str(worker_port)],
            store),
    ]  # fmt: skip
    try:
        for port in (controller_port, worker_port):
            _, body = wait_until(lambda p=port: (s := health(p))[0] == 200 and s, timeout=120, interval=0.5,
                                 what=f"container health on {port}")
            expected = {"temporal_reachable": True, "pollers_running": True}
            if port == controller_port:  # the controller also says the scheduler's workflow tasks succeed
                expected["scheduler_workflow_task_ok"] = True
            assert expected == body["checks"]
        task = run(dockerd, "iris-task:test", ["python3", "-c", "import cloudpickle; print('task image ok')"], store)
        assert 0 == task.wait(timeout=120)["StatusCode"]
        assert b"task image ok" in task.logs()
    finally:
        for container in containers:
            if container.status != "exited":
                container.reload()
            logs = container.logs()[-2000:].decode(errors="replace")
            container.remove(force=True)
            print(logs)
        time.sleep(0)
