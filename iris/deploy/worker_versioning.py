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

import ast
import asyncio
import functools
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

log = structlog.get_logger("iris.deploy.worker_versioning")
BUILD_ID_ENV = "IRIS_BUILD_ID"
# Where the code that replays lives: the workflow definitions, and whatever of these packages they import.
REPLAY_ROOT = "workflows"
CONTROL_PACKAGES = ("workflows", "activities", "scheduler")


def replayed_modules() -> dict[str, Path]:
    """The modules a workflow's replay runs, by name: every module of `workflows`, and, transitively, every
    module of CONTROL_PACKAGES one of them imports (anywhere in the file: a function-level import too).

    Only their source is the build: an activity's body, an agent's or the CLI's code may change without
    pinning running jobs to the controllers that started them (what an activity returns is in history).
    Read from the source files, importing nothing, so every host computes the same set.
    """
    roots = {}
    for package in CONTROL_PACKAGES:
        spec = importlib.util.find_spec(package)  # a top-level package: imports nothing
        if spec is not None and spec.submodule_search_locations:
            roots[package] = Path(next(iter(spec.submodule_search_locations)))
    if REPLAY_ROOT not in roots:
        return {}

    def source(name: str) -> Path | None:
        package, *rest = name.split(".")
        base = roots[package].joinpath(*rest)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None  # a class or function imported by name, or not ours

    found: dict[str, Path] = {}
    todo = [f"{REPLAY_ROOT}.{'.'.join(p.relative_to(roots[REPLAY_ROOT]).with_suffix('').parts)}"
            for p in roots[REPLAY_ROOT].rglob("*.py")]  # fmt: skip
    while todo:
        name = todo.pop().removesuffix(".__init__")
        path = None if name in found else source(name)
        if path is not None:
            found[name] = path
            todo += [m for m in _imports(path) if m.split(".")[0] in roots]
    return dict(sorted(found.items()))


def _imports(path: Path) -> list[str]:
    """Every absolute import in the file, with each of its parent packages (`a.b.c` -> `a`, `a.b`, `a.b.c`)
    and, for `from m import x`, `m.x` (x may be a module). Imports are statements: only statements are
    visited, never expressions (a walk of every node took most of a controller's ~0.25 s for the build id)."""
    names: list[str] = []
    todo: list[ast.AST] = list(ast.parse(path.read_bytes()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        for nested in ("body", "orelse", "finalbody", "handlers", "cases"):  # the statements inside a statement
            block = getattr(node, nested, None)
            if isinstance(block, list):
                todo += block
    parts = [name.split(".") for name in names]
    return [".".join(p[:i]) for p in parts for i in range(1, len(p) + 1)]


@functools.cache
def code_build_id() -> str:
    """A digest of the source of the modules that replay (`replayed_modules`): equal code, equal id."""
    digest = hashlib.sha256()
    for name, path in replayed_modules().items():
        digest.update(f"{name}\0".encode())
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


PROMOTE_FIRST_PAUSE = 0.05  # seconds before `promote` asks again, doubled each time up to PROMOTE_MAX_PAUSE
PROMOTE_MAX_PAUSE = 0.5


@dataclass(frozen=True)
class Promotion:
    """What `promote` did: `current` is the deployment's current build afterwards."""

    build: str
    current: str
    promoted: bool


async def promote(client: Client, build: str, timeout: float = 60.0) -> Promotion:
    """Make `build` the current version unless a newer one is current; idempotent.

    The version exists once this build's worker has polled, so this waits for it (up to `timeout`). It asks
    again soon at first: the version is there ~0.1 s after the worker starts polling, and every controller
    start (so every `iris cluster up`) waits for this before it serves; a fixed 0.5 s cost ~0.45 s of each.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = PROMOTE_FIRST_PAUSE
    while True:
        try:
            return await _promote_once(client, build)
        except (RPCError, LookupError) as err:
            if loop.time() > deadline:
                raise
            log.info("deployment_version_not_ready", build=build, error=str(err), retry_in=pause)
            await asyncio.sleep(pause)
            pause = min(PROMOTE_MAX_PAUSE, pause * 2)


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
