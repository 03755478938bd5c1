"""How a NodePool's and a Pod's status read as a slice state: the pure rules behind `describe`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.contracts.fleet import ControlPlaneAddress, ScaleGroupSpec
from activities.platforms.coreweave_model import Settings, Verdict, assess, k8s_name, pod_manifest

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings(instance_type="gd-8xh100ib-i128", image="w", node_ready_timeout=600, pod_ready_timeout=300)


def stamp(age_s: float) -> str:
    return (NOW - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def nodepool(current: int = 0, age_s: float = 10, conditions: list[dict[str, str]] | None = None,
             deleting: bool = False, status: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """A NodePool as CoreWeave documents it: TARGET in spec.targetNodes, CURRENT in status.currentNodes."""
    meta: dict[str, Any] = {"creationTimestamp": stamp(age_s)}
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    if status is None:
        status = {"currentNodes": current, "conditions": conditions or []}
    return {"metadata": meta, "spec": {"targetNodes": 1}, "status": status}


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
    ("invalid instance type", nodepool(0, conditions=[INVALID]), None, Verdict.INVALID),
    ("healthy conditions", nodepool(1, conditions=HEALTHY), None, Verdict.READY),
    ("at target by its condition alone", nodepool(status={"conditions": HEALTHY}), None, Verdict.READY),
    ("under target by its condition", nodepool(status={"conditions": [cond("AtTarget", "False", "")]}), None,
     Verdict.CREATING),
    ("no status yet", nodepool(status={}), None, Verdict.CREATING),
    ("still no status: not 45 minutes", nodepool(age_s=301, status={}), None, Verdict.FAILED),
    # `readyNodes` is not a documented NodePool field: it alone never makes a node ready, and never keeps a slice
    # waiting past status_timeout either
    ("an undocumented field", nodepool(status={"readyNodes": 1}), None, Verdict.CREATING),
    ("only an undocumented field", nodepool(age_s=301, status={"readyNodes": 1}), None, Verdict.FAILED),
    ("being deleted", nodepool(1, deleting=True), None, Verdict.DELETING),
]


@pytest.mark.parametrize(("case", "pool", "agent", "expected"), CASES, ids=[c[0] for c in CASES])
def test_assess(case: str, pool: dict[str, Any], agent: dict[str, Any] | None, expected: Verdict) -> None:
    """Each combination of NodePool and Pod status reads as one slice verdict, with a reason when it is bad."""
    verdict = assess(pool, agent, SETTINGS, NOW)
    assert expected == verdict.verdict
    if expected in (Verdict.FAILED, Verdict.QUOTA, Verdict.INVALID, Verdict.PREEMPTED):
        assert verdict.reason


def test_reasons_name_the_documented_columns() -> None:
    """What a slice waits for, and why one gave up, in the words of `kubectl get nodepool` (CURRENT/TARGET)."""
    assert "waiting for the node: CURRENT 0/TARGET 1" == assess(nodepool(0), None, SETTINGS, NOW).reason
    assert "NodePool not at target after 600 s (CURRENT 0/TARGET 1)" == assess(
        nodepool(0, age_s=601), None, SETTINGS, NOW).reason  # fmt: skip
    no_status = assess(nodepool(age_s=301, status={"readyNodes": 1}), None, SETTINGS, NOW).reason
    assert no_status.startswith("NodePool reports no status (no status.currentNodes, no conditions) after 300 s")


def test_names_are_dns_safe_and_distinct() -> None:
    """Slice ids become object names: lowercased and cleaned, with a hash when cleaning changed them."""
    assert "iris-h100-1a2b3c4d" == k8s_name("iris-", "h100-1a2b3c4d")
    upper, lower = k8s_name("iris-", "H100_x"), k8s_name("iris-", "h100-x")
    assert upper != lower and upper.startswith("iris-h100-x-")
    long = k8s_name("iris-worker-", "g" * 80)
    assert len(long) <= 63 and long != k8s_name("iris-worker-", "g" * 79)


def test_process_runtime_needs_no_task_dir_on_the_node() -> None:
    """A process-runtime agent runs tasks inside its own container: no node task directory, no CRI socket."""
    group = ScaleGroupSpec(name="cpu", platform="coreweave", hosts_per_slice=1, cpu_millis=1000,
                           memory_bytes=1 << 30, runtime="process")  # fmt: skip
    pod = pod_manifest("cpu-x", group, SETTINGS, ControlPlaneAddress("t:7233", "default", "file:///s"))
    (agent,) = pod["spec"]["containers"]
    assert "--runtime" in agent["args"] and "process" == agent["args"][agent["args"].index("--runtime") + 1]
    assert ["iris-home"] == [v["name"] for v in pod["spec"]["volumes"]]
