"""Which build of the control plane serves which workflow runs (Temporal Worker Versioning).

Every controller is a version of the `iris-control` Worker Deployment, named by its build id: the
same code gives the same id on every host. A workflow run is pinned to the build that started it
(the singletons continue as new onto the current build, see docs/operators.md), so a change to a
workflow never meets a history written by other code and needs no patch marker.

The newest build takes new work: a controller makes its build the deployment's current version
unless the current one was created after it (an old controller restarted during an upgrade does
not take new work back).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import structlog
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from activities.contracts import CONTROL_DEPLOYMENT

log = structlog.get_logger("iris.deployment")
BUILD_ID_ENV = "IRIS_BUILD_ID"
# The packages whose code decides what a workflow does; any change to them is a new build.
CONTROL_PACKAGES = ("workflows", "activities", "scheduler")


def code_build_id() -> str:
    """A digest of the control plane's source (workflows, activities, scheduler): equal code, equal id."""
    digest = hashlib.sha256()
    for package in CONTROL_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".proto")):
            digest.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return f"code-{digest.hexdigest()[:12]}"


def build_id(explicit: str | None = None) -> str:
    """This controller's build: `explicit`, else IRIS_BUILD_ID, else the digest of its code."""
    return explicit or os.environ.get(BUILD_ID_ENV) or code_build_id()


def deployment_config(build: str) -> WorkerDeploymentConfig:
    """Worker Versioning for the control worker: runs are pinned unless their workflow says otherwise."""
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(CONTROL_DEPLOYMENT, build),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


@dataclass(frozen=True)
class Promotion:
    """What `promote` did: `current` is the deployment's current build afterwards."""

    build: str
    current: str
    promoted: bool


async def promote(client: Client, build: str, timeout: float = 60.0) -> Promotion:
    """Make `build` the current version unless a newer one is current; idempotent.

    The version exists once this build's worker has polled, so this waits for it (up to `timeout`).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await _promote_once(client, build)
        except (RPCError, LookupError) as err:
            if loop.time() > deadline:
                raise
            log.info("deployment_version_not_ready", build=build, error=str(err))
            await asyncio.sleep(0.5)


async def _promote_once(client: Client, build: str) -> Promotion:
    described = await client.workflow_service.describe_worker_deployment(
        DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=CONTROL_DEPLOYMENT)
    )
    info = described.worker_deployment_info
    created = {v.deployment_version.build_id: v.create_time.ToNanoseconds() for v in info.version_summaries}
    if build not in created:
        raise LookupError(f"version {build} of {CONTROL_DEPLOYMENT} not registered yet")
    current = info.routing_config.current_deployment_version.build_id
    if current == build or (current in created and created[current] > created[build]):
        return Promotion(build, current, promoted=False)
    try:
        await client.workflow_service.set_worker_deployment_current_version(
            SetWorkerDeploymentCurrentVersionRequest(
                namespace=client.namespace, deployment_name=CONTROL_DEPLOYMENT, build_id=build,
                conflict_token=described.conflict_token,
            )
        )  # fmt: skip
    except RPCError as err:
        if err.status != RPCStatusCode.FAILED_PRECONDITION:  # another controller moved it meanwhile: look again
            raise
        raise LookupError(f"routing of {CONTROL_DEPLOYMENT} changed meanwhile: {err.message}") from err
    log.info("deployment_version_current", build=build, previous=current or None)
    return Promotion(build, build, promoted=True)
