"""Job trees on the session cluster: jobs submitted from inside a task are its job's children, and die with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from iris import IrisClient, JobState, ResourceSpec, get_job_info
from tests.support import Cluster, wait_until

SMALL = ResourceSpec(cpu=0.25, memory="128m")
# For a task that connects a client: importing it takes ~0.5 s of CPU, which a quarter of a core's quota
# stretches to ~2 s before the task can submit anything (each level of a tree paid that in turn).
CLIENT = ResourceSpec(cpu=1, memory="128m")


def _record_and_sleep(pid_dir: str, tag: str) -> None:
    """A descendant that records its pid and environment, then runs until it is killed."""
    print(f"{tag} running", flush=True)
    partial = Path(pid_dir, f".{tag}.partial")  # renamed into place whole: seen at all, seen complete
    partial.write_text(
        f"{os.getpid()}\n{os.environ['IRIS_NAMESPACE']}\n{os.environ['IRIS_PARENT_JOB_ID']}\n"
        f"{os.environ.get('SHARED', '')}\n{os.environ.get('OWN', '')}\n"
    )
    partial.replace(Path(pid_dir, tag))
    time.sleep(600)


def _middle(pid_dir: str) -> None:
    """A child that submits a grandchild from its own task, then runs until it is killed."""
    with IrisClient.connect() as client:
        client.submit(_record_and_sleep, pid_dir, "grandchild", name="grandchild", resources=SMALL)
    _record_and_sleep(pid_dir, "middle")


def _quick() -> dict[str, str]:
    info = get_job_info()
    assert info is not None and info.namespace == os.environ["IRIS_NAMESPACE"]
    assert info.parent_job_id == os.environ["IRIS_PARENT_JOB_ID"]
    return {k: os.environ.get(k, "") for k in ("IRIS_NAMESPACE", "IRIS_PARENT_JOB_ID", "SHARED", "OWN")}


def _coordinator(pid_dir: str) -> dict[str, object]:
    """Submits two children (one submits a grandchild), waits for the quick one, and returns."""
    with IrisClient.connect() as client:
        quick = client.submit(_quick, name="quick", resources=SMALL, env={"OWN": "child"})
        middle = client.submit(_middle, pid_dir, name="middle", resources=CLIENT)
        quick.wait(timeout=90)
        quick_env = quick.results()[0]
        deadline = time.monotonic() + 60
        while not (Path(pid_dir, "grandchild").exists() and Path(pid_dir, "middle").exists()):
            assert time.monotonic() < deadline, "the descendants did not start"
            time.sleep(0.2)
        children = sorted(j.job_id for j in client.list_jobs(parent=os.environ["IRIS_JOB_ID"]))
    return {"quick": quick.job_id, "middle": middle.job_id, "quick_env": quick_env, "children": children}


def _pid(pid_dir: Path, tag: str) -> int:
    return int((pid_dir / tag).read_text().split("\n")[0])


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_parents_end_kills_its_running_descendants(client: IrisClient, tmp_path: Path) -> None:
    """A callable job submits two children from its task (one submits a grandchild), waits for one and
    returns: the children are ids below it, inherit its namespace and env, and when it returns the
    still-running child and grandchild are killed (processes gone), KILLED with an error naming it."""
    job = client.submit(_coordinator, str(tmp_path), name="coordinator", resources=CLIENT, namespace="team-a",
                        env={"SHARED": "from-parent", "OWN": "parent"})
    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    out = job.results()[0]
    root = job.job_id
    assert out["quick"].startswith(root + "/quick-") and out["middle"].startswith(root + "/middle-")
    assert sorted([out["quick"], out["middle"]]) == out["children"]
    assert {"IRIS_NAMESPACE": "team-a", "IRIS_PARENT_JOB_ID": root, "SHARED": "from-parent", "OWN": "child"} == \
        out["quick_env"]

    middle_pid, grandchild_pid = _pid(tmp_path, "middle"), _pid(tmp_path, "grandchild")
    wait_until(lambda: _gone(middle_pid) and _gone(grandchild_pid), timeout=30, what="descendants' processes gone")
    middle = client.wait(out["middle"], timeout=30, raise_on_failure=False)
    assert JobState.KILLED == middle.state
    assert root in middle.error
    assert root == middle.parent_job_id and "team-a" == middle.namespace
    grandchildren = client.list_jobs(parent=out["middle"])
    assert 1 == len(grandchildren)
    grandchild = client.wait(grandchildren[0].job_id, timeout=30, raise_on_failure=False)
    assert JobState.KILLED == grandchild.state
    assert root in grandchild.error
    assert grandchild.job_id.startswith(out["middle"] + "/grandchild-")
    lines = (tmp_path / "grandchild").read_text().split("\n")
    assert ["team-a", out["middle"], "from-parent", "parent"] == lines[1:5]
    assert JobState.SUCCEEDED == client.job_status(out["quick"]).state  # a child that ends leaves its parent be
    assert {root, out["quick"], out["middle"], grandchild.job_id} <= {
        j.job_id for j in client.list_jobs(namespace="team-a")
    }


def _tree_root(pid_dir: str) -> None:
    """A root whose task submits a child (which submits a grandchild) and runs until it is killed."""
    with IrisClient.connect() as client:
        client.submit(_middle, pid_dir, name="middle", resources=CLIENT)
    _record_and_sleep(pid_dir, "root")


def _iris(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the `iris` CLI against the session cluster; it must succeed."""
    done = subprocess.run([sys.executable, "-m", "iris", *args], env={**cluster.env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)
    assert 0 == done.returncode, done.stderr
    return done


def test_iris_job_kill_of_a_root_kills_a_three_level_tree(client: IrisClient, cluster: Cluster, tmp_path: Path) -> None:
    """`iris job list --tree` shows a 3-level tree, `iris job logs ROOT --children` prints every level's
    output, and `iris job kill ROOT` ends the root and every job below it; no process of the tree is left."""
    job = client.submit(_tree_root, str(tmp_path), name="root", resources=CLIENT)
    wait_until(lambda: all((tmp_path / t).exists() for t in ("root", "middle", "grandchild")), timeout=90,
               what="three levels running")
    pids = [_pid(tmp_path, t) for t in ("root", "middle", "grandchild")]
    listed = _iris(cluster, "job", "list", "--tree").stdout
    rows = listed.splitlines()
    at = next(i for i, row in enumerate(rows) if job.job_id in row)
    assert "│ └ middle-" in rows[at + 1] and "│   └ grandchild-" in rows[at + 2], listed
    logs = _iris(cluster, "job", "logs", job.job_id, "--children").stdout
    assert {f"[{job.job_id}/task-0] root running", "middle running", "grandchild running"} <= {
        line if line.startswith(f"[{job.job_id}/task-0]") else line.split("] ", 1)[-1] for line in logs.splitlines()
    }, logs
    killed = _iris(cluster, "job", "kill", job.job_id)
    assert 0 == killed.returncode and "[info" not in killed.stderr, killed.stderr  # its own answer, no log event
    wait_until(lambda: all(_gone(p) for p in pids), timeout=30, what="the tree's processes gone")
    tree = [j for j in client.list_jobs(limit=50) if j.job_id == job.job_id or j.job_id.startswith(job.job_id + "/")]
    assert 3 == len(tree)
    for j in tree:
        assert JobState.KILLED == client.wait(j.job_id, timeout=30, raise_on_failure=False).state


def test_a_child_submitted_after_its_parent_ended_is_killed_before_it_runs(
    client: IrisClient, cluster: Cluster, tmp_path: Path
) -> None:
    """A child whose parent has already ended (a late submit from a lost worker's process) never runs a task:
    it ends KILLED at once, naming the parent; the parent stays as it was."""
    parent = client.submit(_quick, name="ended", resources=SMALL)
    assert JobState.SUCCEEDED == parent.wait(timeout=60).state
    with IrisClient.connect(cluster.info.address, store=cluster.info.store_url) as late:
        late._async.parent_job_id = parent.job_id  # as a client inside one of its tasks would be
        child = late.submit(_record_and_sleep, str(tmp_path), "late", name="late", resources=SMALL)
    status = client.wait(child.job_id, timeout=60, raise_on_failure=False)
    assert JobState.KILLED == status.state
    assert f"its parent job {parent.job_id} had already ended" in status.error
    assert not (tmp_path / "late").exists()
    assert child.job_id.startswith(parent.job_id + "/late-")
    assert JobState.SUCCEEDED == client.job_status(parent.job_id).state


def _failing_parent(pid_dir: str) -> None:
    """Starts a child, waits until it runs, then fails."""
    with IrisClient.connect() as client:
        client.submit(_record_and_sleep, pid_dir, "orphan", name="orphan", resources=SMALL)
    while not Path(pid_dir, "orphan").exists():
        time.sleep(0.1)
    raise RuntimeError("the parent fails")


def test_a_failed_parent_kills_its_running_child(client: IrisClient, tmp_path: Path) -> None:
    """A parent that fails takes its running child with it: KILLED, naming the parent and how it ended."""
    job = client.submit(_failing_parent, str(tmp_path), name="failing", resources=CLIENT)
    assert JobState.FAILED == job.wait(timeout=120, raise_on_failure=False).state
    pid = _pid(tmp_path, "orphan")
    wait_until(lambda: _gone(pid), timeout=30, what="the child's process gone")
    (child,) = client.list_jobs(parent=job.job_id)
    status = client.wait(child.job_id, timeout=30, raise_on_failure=False)
    assert JobState.KILLED == status.state
    assert f"killed: its parent job {job.job_id} ended (FAILED)" == status.error


def _parent_of_one(pid_dir: str) -> None:
    """Starts one sleeping child, then runs until it is killed."""
    with IrisClient.connect() as client:
        client.submit(_record_and_sleep, pid_dir, "child", name="child", resources=SMALL)
    _record_and_sleep(pid_dir, "parent")


def test_kill_after_a_temporal_terminate_of_the_parent_still_kills_its_children(
    client: IrisClient, tmp_path: Path
) -> None:
    """A parent's workflow terminated from outside Iris runs no cleanup; `terminate` of it afterwards kills its
    children (and says something was killed)."""
    job = client.submit(_parent_of_one, str(tmp_path), name="terminated", resources=CLIENT)
    wait_until(lambda: (tmp_path / "child").exists() and (tmp_path / "parent").exists(), timeout=90,
               what="parent and child running")
    child_pid = _pid(tmp_path, "child")

    async def terminate_from_outside() -> None:
        await client._async.temporal.get_workflow_handle(job.job_id).terminate(reason="temporal workflow terminate")

    parent_pid = _pid(tmp_path, "parent")
    client._run(terminate_from_outside())
    # The server cancels the parent's task (its close policy) and its agent stops the task's process: Iris acted on
    # what the terminate reached, and no cleanup of the parent's own ran, so the child still runs.
    wait_until(lambda: _gone(parent_pid), timeout=60, what="the parent's task process gone")
    assert not _gone(child_pid)
    assert client.terminate(job.job_id)
    wait_until(lambda: _gone(child_pid), timeout=30, what="the child's process gone")
    (child,) = client.list_jobs(parent=job.job_id)
    status = client.wait(child.job_id, timeout=30, raise_on_failure=False)
    assert (JobState.KILLED, f"killed: its parent job {job.job_id} was killed") == (status.state, status.error)
