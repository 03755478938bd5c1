"""The node behind the fake API server: NodePools reach their target at once, Pods become local processes.

When the CoreWeave platform creates a worker Pod, this runs the Pod's container command
(`iris worker serve ...` with the Pod's env) as a process of this interpreter, marks the
Pod Ready once the readiness probe's /health answers 200 — as a kubelet would — and
stops the process group when the Pod is deleted. So a job submitted to Iris really runs
on the worker the platform started.

Deviations from a real node, on purpose: `iris` is this interpreter's `-m iris`, and
tasks run as the agent's own user (`--task-user ''`) because the local store is private
to the test's user.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.platforms.k8s_fake import FakeKubernetes, count_nodes


class FakeKubelet:
    """Attach to a FakeKubernetes: every NodePool's nodes join at once, every Pod runs locally."""

    def __init__(self, fake: FakeKubernetes, env: dict[str, str], log_dir: Path) -> None:
        self.fake = fake
        self.env = env
        self.log_dir = log_dir
        self.processes: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self._stopping: set[tuple[str, str]] = set()
        self.stocked_out: set[str] = set()  # instance types with no capacity: their NodePools say so
        fake.on_nodepool_created = self._node_joins
        fake.on_pod_created = self._run_pod
        fake.on_pod_deleting = self._stop_pod

    def _node_joins(self, pool: dict[str, Any]) -> None:
        if pool["spec"]["instanceType"] in self.stocked_out:
            conditions = [c for c in pool["status"]["conditions"] if c["type"] != "AtTarget"]
            pool["status"]["conditions"] = [*conditions, {
                "type": "AtTarget", "status": "False", "reason": "InsufficientCapacity",
                "message": f"no {pool['spec']['instanceType']} available in this region"}]  # fmt: skip
            return
        count_nodes(pool, pool["spec"]["targetNodes"])

    def _run_pod(self, pod: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        (container,) = pod["spec"]["containers"]
        command = [*container.get("command", []), *container.get("args", [])]
        assert command[0] == "iris", command
        argv = [sys.executable, "-m", "iris", *command[1:], "--task-user", ""]
        env = {**self.env, **{e["name"]: e["value"] for e in container.get("env", [])}}
        log = open(self.log_dir / f"{key[1]}.log", "ab")  # noqa: SIM115 - the process owns it
        self.processes[key] = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        port = container["readinessProbe"]["httpGet"]["port"]
        threading.Thread(target=self._probe, args=(key, port), daemon=True).start()

    def _probe(self, key: tuple[str, str], port: int) -> None:
        """readinessProbe: GET /health until 200, then the Pod is Ready; a process that exits fails the Pod."""
        process = self.processes[key]
        while key not in self._stopping:
            if process.poll() is not None:
                self.fake.set_pod_failed(*key, reason=f"Error (exit {process.returncode})")
                return
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        self.fake.set_pod_ready(*key)
                        return
            except OSError:
                pass
            time.sleep(0.2)

    def _stop_pod(self, pod: dict[str, Any]) -> None:
        """Graceful deletion: stop the containers, then the Pod leaves the API."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        self._stopping.add(key)
        process = self.processes.get(key)
        if process is not None:
            stop_group(process)
        self.fake.remove_pod(*key)

    def stop(self) -> None:
        for process in self.processes.values():
            stop_group(process)


def stop_group(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group (the agent and its tasks), SIGKILL what is left after `grace` s."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    except ProcessLookupError:
        pass
