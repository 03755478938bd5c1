"""The local cluster's supervisor: restarts whatever part of the cluster dies, as it was recorded.

`iris cluster up` (and `IrisClient.connect()` when it starts the cluster) runs this as one
more detached process, recorded in `cluster.json` like the others. Twice a second it reads
the process table; a dead dev server, controller or agent is started again with its
recorded command line (same ports, database, store, worker id) through
`LocalCluster.heal`, under the cluster's lock, so it never races `up` or `down`. A
component that keeps dying is restarted after a growing pause (capped), not in a tight
loop. It exits when the cluster is brought down or another supervisor replaced it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import structlog

from iris.cli.logging_config import configure_logging
from iris.local.cluster import SUPERVISOR, LocalCluster
from worker_agent.backoff import Backoff

log = structlog.get_logger("iris.local.supervisor")

POLL_SECONDS = 0.5
RESTART_CAP_SECONDS = 30.0  # the longest pause before restarting a component that keeps dying
STEADY_SECONDS = 60.0  # a component that ran this long starts again without a pause when it dies


@dataclass
class _Watch:
    """What the supervisor knows of one component: since when it is down, and its restart pauses."""

    down_since: float | None = None
    started_at: float = 0.0
    next_try: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(first=1.0, cap=RESTART_CAP_SECONDS))


class Supervisor:
    """Watches the cluster in `home` and restarts what died (see the module docstring)."""

    def __init__(self, home: Path) -> None:
        self.cluster = LocalCluster(home)
        self.watches: dict[str, _Watch] = {}
        self._stop = threading.Event()  # set by SIGTERM: the wait between passes ends at once, not after its poll

    def still_mine(self) -> bool:
        """Whether the cluster is up and this process is its recorded supervisor."""
        info = self.cluster.status()
        return info is not None and info.pids.get(SUPERVISOR) == os.getpid()

    def pass_once(self, now: float) -> list[str]:
        """Restart what is down and due; the names restarted."""
        down = [n for n in self.cluster.down_components() if n != SUPERVISOR]
        for name in down:
            watch = self.watches.setdefault(name, _Watch())
            if watch.down_since is None:
                watch.down_since = now
                if now - watch.started_at > STEADY_SECONDS:
                    watch.backoff.reset()
                    watch.next_try = now
                log.warning("component_down", component=name)
        due = [n for n in down if self.watches[n].next_try <= now]
        if not due:
            return []
        try:
            restarted = self.cluster.heal(due)
        except Exception as err:  # a start that failed (port, binary, disk): try again later
            log.error("restart_failed", components=due, error=str(err).splitlines()[0])
            restarted = []
        done = time.monotonic()
        for name in due:
            watch = self.watches[name]
            if name in restarted:
                log.info("component_restarted", component=name, down_seconds=round(done - (watch.down_since or now), 2))
                watch.down_since, watch.started_at = None, done
            watch.next_try = done + watch.backoff.next()
        return restarted

    def run(self) -> None:
        """Supervise until the cluster goes down, this supervisor is replaced, or SIGTERM."""
        log.info("supervisor_started", home=str(self.cluster.home))
        while not self._stop.is_set() and self.still_mine():
            self.pass_once(time.monotonic())
            self._stop.wait(POLL_SECONDS)
        log.info("supervisor_stopped")

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self._stop.set()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m iris.local.supervisor IRIS_HOME", file=sys.stderr)
        return 2
    configure_logging(json=True)
    supervisor = Supervisor(Path(argv[0]))
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    supervisor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
