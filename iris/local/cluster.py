"""The embedded local cluster: a Temporal dev server, the controller and one process per worker.

`iris cluster up` (and `IrisClient.connect()` with no address) starts these as
detached background processes, so they outlive the command that started them and a
worker can die without taking the others along. Everything lives under `iris_home()`:

    cluster.json      what is running: address, UI URL, store URL, pids (written atomically)
    cluster.lock      an fcntl lock so two concurrent `up` calls start one cluster
    temporal.db       Temporal's SQLite state; survives `down`, reused by the next `up`
    store/            the blob store (`file://` URL) shared by the controller and workers
    logs/<name>.log   stdout+stderr of each process (appended, one header per start)

Every process starts, and stops with the tasks it spawned, through the local platform
(activities.platforms.local_process), as LocalPlatform's slice hosts do. The record is
iris.local.record, the mending iris.local.healing, the command lines iris.local.commands.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
import yaml

from activities.contracts import SEARCH_ATTRIBUTES
from activities.home import iris_home
from activities.platforms.local_process import stop_processes, wait_exited, worker_process_name
from iris.config.cluster_file import ClusterConfig, LocalWorkerSpec, default_config
from iris.local import healing
from iris.local.commands import (
    HOST,
    SERVER_TUNING,
    TEAM_UI_PATH,
    controller_command,
    daemon_environment,
    dashboard_options,
    free_port,
    scale_groups_document,
    supervisor_command,
    temporal_binary,
    temporal_command,
    worker_command,
)
from iris.local.processes import crash_excerpt, log_since, pid_alive
from iris.local.readiness import readiness_client, run_sync, wait_for_temporal, wait_until_ready
from iris.local.record import (
    ALL_COMPONENTS,
    CONTROLLER,
    SUPERVISOR,
    TEMPORAL,
    ClusterInfo,
    ClusterRecord,
    Component,
    down_components,
    private_directory,
    reconfigured,
)
from workflows.scheduler.sharing_state import SharingSettings

__all__ = [
    "ALL_COMPONENTS", "CONTROLLER", "SEARCH_ATTRIBUTES", "SERVER_TUNING", "SUPERVISOR", "TEMPORAL",
    "ClusterInfo", "Component", "LocalCluster", "controller_command", "daemon_environment", "dashboard_options",
    "ensure_running", "free_port", "iris_home", "pid_alive", "private_directory",
    "readiness_client", "scale_groups_document", "supervisor_command", "temporal_binary", "temporal_command",
    "wait_for_temporal", "wait_until_ready", "worker_command", "worker_process_name",
]  # fmt: skip

log = structlog.get_logger(__name__)


class LocalCluster:
    """The local cluster whose state lives in `home`; every method is safe to call from any process."""

    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home).expanduser() if home is not None else iris_home()
        self.record = ClusterRecord(self.home)

    @property
    def state_path(self) -> Path:
        """`cluster.json`: what is running."""
        return self.record.path

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
        return self.record.log_path(name)

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
        supervisor process that restarts whatever dies (iris.local.supervisor). `components` limits
        what starts (tests start only `("temporal",)`). With `wait`, return once every worker is
        healthy. If anything fails to start, a fresh start's processes are stopped again and
        RuntimeError names the logs.
        """
        unknown = [c for c in components if c not in ALL_COMPONENTS]
        if unknown or TEMPORAL not in components:
            raise ValueError(
                f"components: must include 'temporal' and only {ALL_COMPONENTS}, got {components!r}"
            )
        refused = ""  # a config asked for that the running cluster does not take (`reconfigured`)
        with self.record.locked():
            state = self.record.read()
            if state is not None and state.get("pids"):
                refused = reconfigured(state, config, components)
                restarted = healing.heal(self.record, state, temporal_timeout)
                # Asked for, and never had one; not when the config asked for is refused: the command fails and
                # leaves the cluster as it was (a supervisor added then restarted what a test had stopped).
                if supervise and not refused and SUPERVISOR not in state["argv"]:
                    self.record.spawn(state, SUPERVISOR, supervisor_command(self.home))
                    restarted.append(SUPERVISOR)
                if not restarted:
                    return dataclasses.replace(self.record.info(state), already_running=True, config_refused=refused)
                log.info("local_cluster.restarted_components", components=restarted)
            else:
                try:
                    if config is None and state is not None and state.get("argv"):
                        self._start_recorded(state, temporal_timeout)
                    else:
                        self._start(config or default_config(), dynamic_config, components, temporal_timeout, supervise)
                except BaseException:
                    healing.stop(self.record)
                    raise
                restarted = []
            state = self.record.read()
            assert state is not None
            expected = len(state["worker_ids"]) if CONTROLLER in state["pids"] else None
        if wait and expected is not None:
            try:
                run_sync(self._wait_ready(expected, ready_timeout))
            except BaseException:
                if not restarted:  # a fresh start that never came up leaves nothing behind
                    with self.record.locked():
                        healing.stop(self.record)
                raise
        info = self.status()
        assert info is not None
        if info.auth != "none" and wait and expected is not None:
            from iris.auth.bootstrap import write_admin_token

            write_admin_token(self.home, info.address)  # the first admin's token, once, into admin.token
        if info.auth != "none":  # team mode: the Iris API is the way in; Temporal's own ports are printed nowhere
            log.info("local_cluster.up", api=info.dashboard_url, auth=info.auth, workers=len(info.worker_ids))
        else:
            log.info("local_cluster.up", address=info.address, ui=info.ui_url, workers=len(info.worker_ids))
        return dataclasses.replace(info, restarted=restarted, config_refused=refused)

    def down(self) -> None:
        """Stop every process (supervisor, workers, controller, Temporal); temporal.db, store/ and the record stay."""
        with self.record.locked():
            healing.stop(self.record)

    def status(self) -> ClusterInfo | None:
        """The recorded cluster and whether it is alive; None when nothing is recorded (never up, or down).

        A cluster that died without `down` (e.g. after a reboot) is reported with `running=False`.
        """
        return self.record.running_info()

    def start_worker(self, spec: LocalWorkerSpec) -> int:
        """Start (or restart, after a kill) one worker process against the running cluster; its pid."""
        with self.record.locked():
            state = self.record.read()
            info = self.record.info(state) if state is not None and state.get("pids") else None
            if state is None or info is None or not info.running:
                raise RuntimeError(
                    f"local cluster in {self.home} is not running; start it with `iris cluster up`"
                )
            name = worker_process_name(spec.worker_id)
            if name in state["pids"] and self.record.process(state, name).alive():
                raise ValueError(
                    f"worker_id: worker {spec.worker_id!r} is already running (pid {state['pids'][name]})"
                )
            argv = worker_command(spec, address=state["address"], store_url=state["store_url"],
                                  task_api=_task_api(state))  # fmt: skip
            self.record.spawn(state, name, argv, worker_id=spec.worker_id)
            if spec.worker_id not in state["worker_ids"]:
                state["worker_ids"].append(spec.worker_id)
            self.record.write(state)
            pid: int = state["pids"][name]
            return pid

    def kill_process(self, name: str, sig: int = signal.SIGTERM, wait: float = 0.0, keep_down: bool = False) -> bool:
        """Send `sig` to process `name` (or a worker id) and its group; False if it was not running.

        With `wait` > 0, wait that many seconds for the whole group to exit. The process
        stays recorded (reported in `status().dead`), so the supervisor restarts it and
        `start_worker` can bring it back; with `keep_down` (a worker only) it is forgotten
        first, as `stop_worker` forgets, so it stays down until `start_worker`.
        """
        with self.record.locked():
            state = self.record.read() or {}
            pids: dict[str, int] = state.get("pids", {})
            if name not in pids and worker_process_name(name) in pids:
                name = worker_process_name(name)
            if name not in pids:
                raise ValueError(
                    f"name: no process {name!r} in the local cluster (known: {', '.join(sorted(pids))})"
                )
            process = self.record.process(state, name)
            if keep_down:
                worker_id = next((w for w in state.get("worker_ids", []) if worker_process_name(w) == name), None)
                if worker_id is None:
                    raise ValueError(f"keep_down: {name!r} is not a worker")
                self._forget(state, name, worker_id)
        if not process.owned() or not process.group_alive():
            return False
        process.signal_group(sig)
        wait_exited({name: process}, wait)
        return True

    def _forget(self, state: dict[str, Any], name: str, worker_id: str) -> None:
        """Take a worker out of the record (under its lock), so neither `up()` nor the supervisor brings it back."""
        for key in ("pids", "start_ticks", "argv"):
            state.get(key, {}).pop(name, None)
        if worker_id in state.get("worker_ids", []):
            state["worker_ids"].remove(worker_id)
        self.record.write(state)

    def stop_worker(self, worker_id: str, wait: float = 10.0) -> None:
        """Stop a worker for good: forget it, so neither `up()` nor the supervisor brings it back, then stop its
        process group (SIGTERM, `wait` seconds, SIGKILL), as the local platform stops a slice's hosts."""
        with self.record.locked():
            state = self.record.read()
            if state is None:
                return
            name = worker_process_name(worker_id)
            doomed = self.record.processes(state, [name])
            self._forget(state, name, worker_id)
        stop_processes(doomed, wait)

    def restart_process(self, name: str, timeout: float = 30.0) -> int:
        """Start a recorded process that died (`temporal`, `controller` or a worker) exactly as before; its pid.

        The same command line means the same ports, SQLite file, store and worker id, so
        a fault test can kill any component and bring it back. For `temporal`, wait up to
        `timeout` seconds until the server answers again. ValueError if `name` still runs.
        """
        with self.record.locked():
            state = self.record.read()
            if state is None or not state["pids"]:
                raise RuntimeError(f"local cluster in {self.home} is not running; start it with `iris cluster up`")
            if name not in state["pids"] and worker_process_name(name) in state["pids"]:
                name = worker_process_name(name)
            if name not in state.get("argv", {}):
                raise ValueError(
                    f"name: no recorded process {name!r} (known: {', '.join(sorted(state['pids']))})"
                )
            if self.record.process(state, name).alive():
                raise ValueError(f"name: {name!r} is still running (pid {state['pids'][name]})")
            healing.respawn(self.record, state, name, timeout)
            pid = int(state["pids"][name])
        log.info("local_cluster.restarted", process=name, pid=pid)
        return pid

    def heal(self, names: Sequence[str] | None = None, temporal_timeout: float = 30.0) -> list[str]:
        """Start again whichever recorded processes are down (only `names`, if given); those started.

        What the supervisor calls; nothing happens to a cluster that is not recorded as up.
        """
        with self.record.locked():
            state = self.record.read()
            if state is None or not state["pids"]:
                return []
            return healing.heal(self.record, state, temporal_timeout, names)

    def down_components(self, info: ClusterInfo | None = None) -> list[str]:
        """The recorded processes that are not running now (the dev server also when its port does not answer)."""
        return down_components(info or self.status())

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
        previous = self.record.read() or {}
        state: dict[str, Any] = {
            "pids": {},
            "start_ticks": {},
            "worker_ids": [],
            "argv": {},
            "store_url": self.store_url,
            "config_path": config.source,
            "started_at": time.time(),
        }
        if config.auth.team:
            state["auth"] = config.auth.mode
        self._start_temporal(state, previous, dynamic_config, temporal_timeout,
                             ui_public_path=TEAM_UI_PATH if config.auth.team else "")
        if CONTROLLER in components:
            scaling: dict[str, Path] = {}
            if config.scale_groups or config.sharing != SharingSettings() or config.auth.team:
                # The controller reads its scale groups and sharing settings from a file, as in production.
                scaling["config_path"] = self.home / "scale-groups.yaml"
                scaling["config_path"].write_text(yaml.safe_dump(scale_groups_document(config), sort_keys=False))
            dashboard_port = free_port(previous.get("dashboard_port"))
            state.update(dashboard_port=dashboard_port, dashboard_url=f"http://{HOST}:{dashboard_port}")
            argv = controller_command(address=state["address"], store_url=state["store_url"], **scaling)
            argv += dashboard_options(dashboard_port, state["ui_url"])
            self.record.spawn(state, CONTROLLER, argv)
        if "workers" in components:
            for spec in config.local_workers():
                argv = worker_command(spec, address=state["address"], store_url=state["store_url"],
                                      task_api=_task_api(state))  # fmt: skip
                self.record.spawn(state, worker_process_name(spec.worker_id), argv, worker_id=spec.worker_id)
                state["worker_ids"].append(spec.worker_id)
        if supervise:
            self.record.spawn(state, SUPERVISOR, supervisor_command(self.home))
        self.record.write(state)

    def _start_recorded(self, state: dict[str, Any], temporal_timeout: float) -> None:
        """Start a stopped cluster again from its record: the same command lines, ports and database."""
        state.update(pids={}, start_ticks={}, started_at=time.time())
        if TEMPORAL not in state["argv"]:
            raise RuntimeError(f"the record in {self.state_path} has no dev server command; run `iris cluster down`")
        healing.heal(self.record, state, temporal_timeout, down=list(state["argv"]))

    def _start_temporal(
        self,
        state: dict[str, Any],
        previous: Mapping[str, Any],
        dynamic_config: Mapping[str, str] | None,
        timeout: float,
        ui_public_path: str = "",
    ) -> None:
        """Start the dev server on free ports (the previous ones if still free) and wait until it answers."""
        binary = temporal_binary()
        log_file = self.log_path(TEMPORAL)
        for attempt in range(healing.PORT_ATTEMPTS):
            port = free_port(previous.get("temporal_port") if attempt == 0 else None)
            ui_port = free_port(previous.get("ui_port") if attempt == 0 else None, avoid=port)
            address = f"{HOST}:{port}"
            state.update(
                address=address, ui_url=f"http://{HOST}:{ui_port}{ui_public_path}", temporal_port=port, ui_port=ui_port
            )
            argv = temporal_command(
                binary=binary, port=port, ui_port=ui_port, db_path=self.db_path, dynamic_config=dynamic_config,
                ui_public_path=ui_public_path,
            )
            offset = log_file.stat().st_size if log_file.exists() else 0
            self.record.spawn(state, TEMPORAL, argv)
            try:
                healing.await_temporal(self.record, state, timeout)
                return
            except RuntimeError as e:
                # All of this start's output: the reason comes first, before the server's panic dump.
                output = log_since(log_file, offset, limit=None)
                if "address already in use" in output and attempt + 1 < healing.PORT_ATTEMPTS:
                    log.warning("local_cluster.port_taken", port=port, ui_port=ui_port)
                    continue
                raise RuntimeError(f"{e}\n--- end of {log_file} ---\n{crash_excerpt(output)}") from None
        raise AssertionError("unreachable")

    async def _wait_ready(self, expected_workers: int, timeout: float) -> None:
        """wait_until_ready, failing fast if the controller or a worker process exits meanwhile."""
        state = self.record.read()
        assert state is not None
        names = [n for n in state["pids"] if n not in (TEMPORAL, SUPERVISOR)]

        def exited() -> str | None:
            gone = [n for n in names if not self.record.process(state, n).alive()]
            return f"{', '.join(gone)} exited" if gone else None

        logs = [self.log_path(n) for n in [*names, TEMPORAL]]
        from iris.deploy.worker_versioning import build_id

        await wait_until_ready(state["address"], expected_workers, timeout, log_files=logs, abort_if=exited,
                               build=build_id(), home=str(self.home))  # fmt: skip


def ensure_running(home: Path | str | None = None, config: ClusterConfig | None = None) -> ClusterInfo:
    """The running local cluster in `home` (default `iris_home()`), started (supervised) if it is not.

    A recorded cluster comes back with its recorded config, never the default.
    """
    return LocalCluster(home).up(config, supervise=True)


def _task_api(state: Mapping[str, Any]) -> str:
    """In team mode, the Iris API the workers' tasks reach with their job's token (the controller's); else ""."""
    return str(state.get("dashboard_url", "")) if state.get("auth", "none") != "none" else ""
