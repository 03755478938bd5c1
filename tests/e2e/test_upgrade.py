"""The operator's upgrade (docs/operators.md): a new controller build takes new jobs, running ones finish where
they started, and the old build can then be retired.

Build A is the cluster's own controller; build B is a second `iris controller serve --build-id` started by the
test. Which build ran a workflow is read from its history: every completed workflow task names its version.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import CONTROL_DEPLOYMENT, SCHEDULER_WORKFLOW_ID, task_workflow_id
from iris import IrisClient, JobState
from iris.config.cluster_file import parse_config
from iris.local.cluster import CONTROLLER, controller_command
from tests.support import Cluster, running_cluster, wait_until

FLEET = {"local": {"worker_groups": [{"name": "cpu", "count": 1, "resources": {"cpu": 4, "memory": "4g"}}]}}
BUILD_B = "test-build-b"


@pytest.fixture(scope="module")
def upgrade_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("iris-upgrade"), parse_config(FLEET, "upgrade fleet")) as c:
        yield c


async def _builds(address: str, workflow_id: str) -> set[str]:
    """The builds that completed workflow tasks of the workflow's latest run."""
    client = await Client.connect(address)
    handle = client.get_workflow_handle(workflow_id)
    return {
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        async for e in handle.fetch_history_events()
        if e.HasField("workflow_task_completed_event_attributes")
    }


async def _current_build(address: str) -> str:
    """The deployment's current build; "" while the server is too busy with it to say (it refuses a describe
    while the deployment takes a new version: "too many requests issued to Worker Deployment")."""
    client = await Client.connect(address)
    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=CONTROL_DEPLOYMENT)
        )
    except RPCError as err:
        if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
            raise
        return ""
    return described.worker_deployment_info.routing_config.current_deployment_version.build_id


def _start_build_b(cluster: Cluster, log: Path) -> subprocess.Popen[bytes]:
    argv = [*controller_command(address=cluster.info.address, store_url=cluster.info.store_url), "--build-id", BUILD_B]
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=cluster.env)


def test_a_job_finishes_on_its_build_while_the_new_build_takes_new_jobs(upgrade_cluster: Cluster) -> None:
    """Job 1 starts on build A and finishes there after build B became current; job 2 runs on B; with A
    stopped, B alone runs job 3 (the scheduler moved to B on its own)."""
    address = upgrade_cluster.info.address
    build_a = wait_until(lambda: asyncio.run(_current_build(address)), what="the current build")
    with IrisClient.connect(address, store=upgrade_cluster.info.store_url) as iris:
        first = iris.submit_command(["sleep", "6"], name="on-build-a")
        wait_until(lambda: first.status().state == JobState.RUNNING, timeout=60, what="job 1 running")
        controller_b = _start_build_b(upgrade_cluster, upgrade_cluster.local.log_path("controller-b"))
        try:
            wait_until(lambda: asyncio.run(_current_build(address)) == BUILD_B, timeout=90, interval=0.5,
                       what="build B current")  # fmt: skip
            second = iris.submit_command(["true"], name="on-build-b")
            assert JobState.SUCCEEDED == second.wait(timeout=60).state
            assert JobState.SUCCEEDED == first.wait(timeout=60).state
            assert {build_a} == asyncio.run(_builds(address, first.job_id))
            assert {build_a} == asyncio.run(_builds(address, task_workflow_id(first.job_id, 0)))
            assert {BUILD_B} == asyncio.run(_builds(address, second.job_id))
            assert {BUILD_B} == asyncio.run(_builds(address, task_workflow_id(second.job_id, 0)))
            wait_until(lambda: asyncio.run(_builds(address, SCHEDULER_WORKFLOW_ID)) == {BUILD_B}, timeout=30,
                       what="the scheduler continued as new onto build B")  # fmt: skip

            assert upgrade_cluster.local.kill_process(CONTROLLER, wait=30)  # retire build A
            third = iris.submit_command(["true"], name="after-a-retired")
            assert JobState.SUCCEEDED == third.wait(timeout=60).state
            assert {BUILD_B} == asyncio.run(_builds(address, third.job_id))
        finally:
            controller_b.terminate()
            try:
                controller_b.wait(timeout=30)
            except subprocess.TimeoutExpired:
                controller_b.kill()
                controller_b.wait()
