"""How a NodePool's and a Pod's status read as a slice state: the pure rules behind `describe`."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from activities.platforms.base import ControlPlaneAddress, ScaleGroupSpec
from activities.platforms.coreweave_model import Settings, Verdict, assess, k8s_name, pod_manifest

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings(instance_type="gd-8xh100ib-i128", image="w", node_ready_timeout=600, pod_ready_timeout=300)


def stamp(age_s: float) -> str:
    return (NOW - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def nodepool(ready: int = 0, age_s: float = 10, conditions: list[dict[str, str]] | None = None,
             deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"creationTimestamp": stamp(age_s)}
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    return {"metadata": meta, "spec": {"targetNodes": 1},
            "status": {"readyNodes": ready, "conditions": conditions or []}}  # fmt: skip


def pod(ready: bool = False, age_s: float = 10, phase: str = "Pending", waiting: str = "",
        restarts: int = 0) -> dict[str, Any]:  # fmt: skip
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {
        "metadata": {"creationTimestamp": stamp(age_s)},
        "status": {"phase": phase, "hostIP": "10.1.2.3",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "containerStatuses": [{"restartCount": restarts, "state": state}]},
    }  # fmt: skip


def cond(type_: str, status: str, reason: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason}


INVALID = cond("Valid", "False", "InvalidInstanceType")
HEALTHY = [cond("Valid", "True", "Valid"), cond("AtTarget", "True", "")]
CASES = [
    ("node still booting", nodepool(0), None, Verdict.CREATING),
    ("node boot timed out", nodepool(0, age_s=601), None, Verdict.FAILED),
    ("node ready, no agent yet", nodepool(1), None, Verdict.READY),
    ("agent starting", nodepool(1), pod(), Verdict.STARTING),
    ("agent ready", nodepool(1), pod(ready=True, phase="Running"), Verdict.READY),
    ("agent never ready", nodepool(1), pod(age_s=301), Verdict.FAILED),
    ("image pull backing off, within time", nodepool(1), pod(waiting="ImagePullBackOff"), Verdict.STARTING),
    ("invalid image", nodepool(1), pod(waiting="InvalidImageName"), Verdict.FAILED),
    ("a few crashes", nodepool(1), pod(waiting="CrashLoopBackOff", restarts=3), Verdict.STARTING),
    ("crash loop", nodepool(1), pod(waiting="CrashLoopBackOff", restarts=4), Verdict.FAILED),
    ("agent exited", nodepool(1), pod(phase="Failed"), Verdict.FAILED),
    ("node lost under the agent", nodepool(0), pod(ready=True), Verdict.PREEMPTED),
    ("no capacity", nodepool(0, conditions=[cond("AtTarget", "False", "InsufficientCapacity")]), None, Verdict.QUOTA),
    ("over quota", nodepool(0, conditions=[cond("Valid", "False", "QuotaExceeded")]), None, Verdict.QUOTA),
    ("quota exceeded", nodepool(0, conditions=[cond("QuotaExceeded", "True", "")]), None, Verdict.QUOTA),
    ("quota not exceeded", nodepool(0, conditions=[cond("QuotaExceeded", "False", "")]), None, Verdict.CREATING),
    ("invalid instance type", nodepool(0, conditions=[INVALID]), None, Verdict.FAILED),
    ("healthy conditions", nodepool(1, conditions=HEALTHY), None, Verdict.READY),
    ("being deleted", nodepool(1, deleting=True), None, Verdict.DELETING),
]


@pytest.mark.parametrize(("case", "pool", "agent", "expected"), CASES, ids=[c[0] for c in CASES])
def test_assess(case: str, pool: dict[str, Any], agent: dict[str, Any] | None, expected: Verdict) -> None:
    """Each combination of NodePool and Pod status reads as one slice verdict, with a reason when it is bad."""
    verdict = assess(pool, agent, SETTINGS, NOW)
    assert expected == verdict.verdict
    if expected in (Verdict.FAILED, Verdict.QUOTA, Verdict.PREEMPTED):
        assert verdict.reason


def test_names_are_dns_safe_and_distinct() -> None:
    """Slice ids become object names: lowercased and cleaned, with a hash when cleaning changed them."""
    assert "iris-h100-1a2b3c4d" == k8s_name("iris-", "h100-1a2b3c4d")
    upper, lower = k8s_name("iris-", "H100_x"), k8s_name("iris-", "h100-x")
    assert upper != lower and upper.startswith("iris-h100-x-")
    long = k8s_name("iris-worker-", "g" * 80)
    assert len(long) <= 63 and long != k8s_name("iris-worker-", "g" * 79)


def test_containerd_agent_runs_the_task_runner_from_the_node(tmp_path: Path) -> None:
    """For containerd the init container copies the runner's packages under host_dir and the agent imports
    them from there, so the code it mounts into task containers is on the node at the same path."""
    group = ScaleGroupSpec(name="h100", platform="coreweave", hosts_per_slice=1, cpu_millis=1000,
                           memory_bytes=1 << 30, runtime="containerd")  # fmt: skip
    settings = SETTINGS.model_copy(update={"host_dir": str(tmp_path / "node")})
    pod = pod_manifest("h100-x", group, settings, ControlPlaneAddress("t:7233", "default", "file:///s"))
    (init,) = pod["spec"]["initContainers"]
    assert [{"name": "iris-home", "mountPath": settings.host_dir}] == init["volumeMounts"]
    assert "python" == init["command"][0]
    subprocess.run([sys.executable, *init["command"][1:]], check=True, timeout=60)
    (agent,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    probe = "from worker_agent.runtimes.base import runner_code_mounts; print([s for s, _ in runner_code_mounts()])"
    # cwd elsewhere: the agent runs as the `iris` console script, whose sys.path starts with PYTHONPATH
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": env["PYTHONPATH"]},
                         cwd=tmp_path, check=True, capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    code = tmp_path / "node" / "code"
    assert [str(code / "worker_agent"), str(code / "cloudpickle")] == ast.literal_eval(out)
    assert (code / "worker_agent" / "task_runner.py").is_file()


def test_process_runtime_needs_no_init_container() -> None:
    """A process-runtime agent runs tasks inside its own container: nothing to copy to the node."""
    group = ScaleGroupSpec(name="cpu", platform="coreweave", hosts_per_slice=1, cpu_millis=1000,
                           memory_bytes=1 << 30, runtime="process")  # fmt: skip
    pod = pod_manifest("cpu-x", group, SETTINGS, ControlPlaneAddress("t:7233", "default", "file:///s"))
    assert "initContainers" not in pod["spec"]
    assert "PYTHONPATH" not in {e["name"] for e in pod["spec"]["containers"][0]["env"]}
