"""The local cluster's record: `cluster.json`, its lock, and the processes it names.

`cluster.json` holds the address, ports, store URL and, per process, its pid, start time and
command line, written atomically so a reader never sees half of it. A process is started
through the local platform (`start_worker` for a worker, `start_process` for the others) and
recorded at once, so `down` can always find it and a dead one comes back as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # annotations only: finding a cluster's address does not import the config schema
    from activities.platforms.local_process import LocalProcess
    from iris.config.cluster_file import ClusterConfig

TEMPORAL = "temporal"
CONTROLLER = "controller"
SUPERVISOR = "supervisor"

Component = Literal["temporal", "controller", "workers"]
ALL_COMPONENTS: tuple[Component, ...] = ("temporal", "controller", "workers")


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
    auth: str = "none"
    """`tokens` in team mode (iris/auth): users reach the cluster through the Iris API at `dashboard_url`."""
    config_refused: str = ""
    """Set by `up()`: why the config it was given was not applied to the cluster it found running."""


def private_directory(path: Path) -> Path:
    """Create `path` (and parents) readable by its owner only: IRIS_HOME holds logs, state and the store."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


class ClusterRecord:
    """`cluster.json` in `home` and the processes it records (see the module docstring)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    @property
    def path(self) -> Path:
        return self.home / "cluster.json"

    def log_path(self, name: str) -> Path:
        """Where process `name` (`temporal`, `controller`, `worker-<id>`) writes its output."""
        return self.home / "logs" / f"{name}.log"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold `cluster.lock` (fcntl, released if this process dies) for one state change."""
        private_directory(self.home)
        with open(os.open(self.home / "cluster.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def read(self) -> dict[str, Any] | None:
        """`cluster.json`, or None if absent or unreadable (never half-written: writes are atomic)."""
        try:
            state: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        state.setdefault("pids", {})
        state.setdefault("start_ticks", {})
        state.setdefault("worker_ids", [])
        state.setdefault("argv", {})
        return state

    def write(self, state: Mapping[str, Any]) -> None:
        """Replace `cluster.json` atomically, so readers never see a partial file."""
        tmp = self.path.with_name(f".cluster.json.{os.getpid()}.tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path)

    @staticmethod
    def process(state: Mapping[str, Any], name: str) -> LocalProcess:
        """The recorded process `name` by identity (pid and start time)."""
        # The processes' machinery (psutil, structlog) is imported to look at them: a command that finds no
        # cluster recorded (`iris job status` with none) does not load it.
        from activities.platforms.local_process import LocalProcess

        ticks = state.get("start_ticks", {}).get(name)
        # A float is a start time an earlier Iris wrote (wall clock): not comparable, so whatever runs at the pid.
        return LocalProcess(int(state["pids"][name]), ticks if isinstance(ticks, int) else None)

    def processes(self, state: Mapping[str, Any], names: Sequence[str] | None = None) -> dict[str, LocalProcess]:
        """The recorded processes (those of `names`, if given) by name."""
        return {n: self.process(state, n) for n in state["pids"] if names is None or n in names}

    def running_info(self) -> ClusterInfo | None:
        """The recorded cluster and whether it is alive; None when nothing is recorded (never up, or down)."""
        state = self.read()
        if state is None or not state.get("pids"):
            return None
        return self.info(state)

    def info(self, state: Mapping[str, Any]) -> ClusterInfo:
        """ClusterInfo from the recorded state, checking each process now."""
        from iris.local.processes import port_open

        pids: dict[str, int] = dict(state["pids"])
        dead = [name for name in pids if not self.process(state, name).alive()]
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
            auth=state.get("auth", "none"),
        )

    def spawn(self, state: dict[str, Any], name: str, argv: Sequence[str], worker_id: str | None = None) -> None:
        """Start process `name` and record it in `state` and on disk at once, so `down` can always find it.

        A worker (`worker_id`, or a recorded worker's process name) starts as the local platform
        starts its slice hosts. The command line is recorded too, so a dead process comes back as it was.
        """
        from activities.platforms.local_process import start_process, start_worker, worker_process_name
        from iris.local.commands import child_env

        worker_id = worker_id or next((w for w in state["worker_ids"] if worker_process_name(w) == name), None)
        env = child_env(self.home)
        if worker_id is not None:
            started = start_worker(argv, home=self.home, worker_id=worker_id, env=env)
        else:
            started = start_process(argv, self.log_path(name), env)
        state["pids"][name] = started.pid
        state["start_ticks"][name] = started.started
        state.setdefault("argv", {})[name] = list(argv)
        self.write(state)


def down_components(info: ClusterInfo | None) -> list[str]:
    """The recorded processes that are not running now (the dev server also when its port does not answer)."""
    if info is None:
        return []
    down = list(info.dead)
    if TEMPORAL in info.pids and not info.running and TEMPORAL not in down:
        down.insert(0, TEMPORAL)
    return down


def reconfigured(state: Mapping[str, Any], config: ClusterConfig | None, components: Sequence[Component]) -> str:
    """Why an explicitly asked-for config cannot be applied to the running cluster ("" when it is the same
    fleet): the recorded one is kept until `iris cluster down`."""
    if config is None or "workers" not in components:
        return ""
    requested = [s.worker_id for s in config.local_workers()]
    running = list(state["worker_ids"])
    if requested == running:
        return ""
    return (f"the local cluster already runs another fleet ({', '.join(running) or 'no workers'}; the config asks for "
            f"{', '.join(requested) or 'none'}): run `iris cluster down` first to apply it")  # fmt: skip
