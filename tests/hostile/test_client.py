"""The Python client does what a new user expects: failed results raise, connecting does not nag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iris import Constraint, IrisClient, JobFailedError, JobState, ResourceSpec
from iris.config.cluster_file import parse_config
from tests.ops.cli import iris
from tests.support import Cluster, wait_until


def test_results_of_a_failed_job_raise_unless_partial(client: IrisClient) -> None:
    """`results()` on a FAILED job raises JobFailedError naming the task's error; `partial=True` gives None."""
    job = client.submit(_fail_on_odd, resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2),
                        max_task_failures=0)
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.FAILED == status.state
    with pytest.raises(JobFailedError) as raised:
        job.results()
    assert "odd task 1" in str(raised.value)
    assert 1 in raised.value.task_errors
    partial = job.results(partial=True)
    assert 2 == len(partial) and partial[1] is None


def _fail_on_odd() -> int:
    import os

    index = int(os.environ["IRIS_TASK_INDEX"])
    if index % 2:
        raise RuntimeError(f"odd task {index}")
    return index


def test_connecting_without_a_config_does_not_warn_about_one(cluster: Cluster, tmp_path: Path) -> None:
    """`IrisClient.connect()` reaches a cluster started from a config without "already running" advice.

    Asking for a different config explicitly is refused, since that config is not applied: `iris cluster
    up --config` exits 1 with one line (it exited 0 after a log line, and scripts took the config as applied).
    """
    info = cluster.local.up(None)
    assert info.already_running and "" == info.config_refused
    other = {"local": {"worker_groups": [{"name": "x", "resources": {"cpu": 1, "memory": "1g"}}]}}
    refused = cluster.local.up(parse_config(other, "t")).config_refused
    assert "iris cluster down" in refused and "x-0" in refused, refused
    path = tmp_path / "other.yaml"
    path.write_text(json.dumps(other))
    supervised = "supervisor" in cluster.local.record.read()["pids"]
    ran = iris(cluster, "cluster", "up", "--config", str(path))
    assert 1 == ran.returncode, ran.stderr
    assert supervised == ("supervisor" in cluster.local.record.read()["pids"])  # refused: the cluster as it was
    assert "iris cluster down" in ran.stderr.strip().splitlines()[-1], ran.stderr
    assert any(line.startswith("error:") for line in ran.stderr.splitlines()), ran.stderr


def test_job_details_in_the_temporal_ui_are_markdown(client: IrisClient) -> None:
    """The UI shows a job's request as a Markdown table and its state, counts and errors as Markdown."""
    from temporalio.api.sdk.v1 import WorkflowMetadata

    job = client.submit_command(
        ["sh", "-c", "echo hi; exit 3"], name="ui-details", resources=ResourceSpec(cpu=0.5, memory="256m"),
        constraints=[Constraint("pool", "EQ", "cpu")],
    )
    assert JobState.FAILED == job.wait(timeout=120, raise_on_failure=False).state

    async def read() -> tuple[str, str]:
        handle = client._async.temporal.get_workflow_handle(job.job_id)
        static = await (await handle.describe()).static_details()
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        return static or "", metadata.current_details

    static, current = client._run(read())
    assert "| **Runs** | `sh -c 'echo hi; exit 3'` |" in static.splitlines()
    assert "| **Tasks** | 1 x 0.5 cpu, 256 MiB |" in static.splitlines()
    assert "| **Constraints** | `pool = cpu` |" in static.splitlines()
    assert current.startswith("**FAILED** — 1 task: 1 failed")
    assert "| 0 | FAILED | 0 | exit code 3 |" in current.splitlines()
    assert "{" not in current and "{" not in static  # no Python dict repr


def test_every_iris_workflow_has_an_iris_kind(client: IrisClient) -> None:
    """Each Iris workflow in the Temporal UI carries `IrisKind`, so the README's saved queries can filter by it."""
    from temporalio.common import SearchAttributeKey

    from activities import autoscaling
    from activities.contracts import KIND_ATTRIBUTE, KINDS, SLICE_KIND
    from workflows.registry import ALL_WORKFLOWS

    job = client.submit_command(["true"], name="kinds", resources=ResourceSpec(cpu=0.5, memory="256m"))
    job.wait(timeout=120)
    kind = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)
    types = ", ".join(f"'{w.__name__}'" for w in ALL_WORKFLOWS)

    async def kinds_by_type() -> dict[str, set[str | None]]:
        found: dict[str, set[str | None]] = {}
        async for wf in client._async.temporal.list_workflows(f"WorkflowType IN ({types})"):
            found.setdefault(wf.workflow_type, set()).add(wf.typed_search_attributes.get(kind))
        return found

    async def ids(query: str) -> set[str]:
        return {wf.id async for wf in client._async.temporal.list_workflows(query)}

    found = client._run(kinds_by_type())
    expected = {"JobWorkflow": {"Job"}, "TaskWorkflow": {"Task"}, "WorkerWorkflow": {"Worker"},
                "SchedulerWorkflow": {"Scheduler"}}
    assert expected == {t: k for t, k in found.items() if t in expected}
    assert all(k <= set(KINDS) for k in found.values()), found  # slices and the autoscaler too, when present
    assert (autoscaling.KIND.name, autoscaling.SLICE_KIND) == (KIND_ATTRIBUTE, SLICE_KIND)
    # Visibility is written just after the history: the job's final state shows up a moment after `wait`.
    wait_until(lambda: job.job_id in client._run(ids('IrisKind = "Job" AND IrisJobState = "SUCCEEDED"')),
               timeout=10, what="the job listed as SUCCEEDED")  # fmt: skip
    assert f"{job.job_id}/task-0" in client._run(ids('IrisKind = "Task"'))
    monitors = client._run(ids('IrisKind = "Worker" AND ExecutionStatus = "Running"'))
    assert any(m.startswith("iris-worker-cpu-0-session-") for m in monitors), monitors  # one per agent session


@pytest.mark.parametrize("field", ["parent", "under", "user", "namespace", "name", "state"])
def test_a_listing_filter_that_is_not_a_string_names_the_field(client: IrisClient, field: str) -> None:
    """`list_jobs(parent=123)` raised AttributeError from deep in the query builder."""
    with pytest.raises(ValueError, match=f"^{field} must be"):
        client.list_jobs(**{field: 123})  # type: ignore[arg-type]
