"""Reading jobs without querying workflows: visibility for lists and progress, the result for `wait`.

The client counts its own workflow queries through a Temporal client interceptor, so
the tests see what a hundred polling users would cost the controller: nothing, for
`list_jobs` and `wait`.
"""

from __future__ import annotations

import getpass
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
)

from activities.contracts import task_workflow_id
from iris import IrisClient, JobState, JobStatus, ResourceSpec
from iris.client.async_client import AsyncIrisClient
from iris.client.iris_client import _LoopThread
from tests.support import Cluster
from workflows.messages import TaskResult
from workflows.visibility import MAX_ERROR_CHARS, MAX_JOB_ERROR_CHARS

SMALL = ResourceSpec(cpu=0.2, memory="64m")
TERMINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.UNSCHEDULABLE)


class QueryCounter(Interceptor):
    """Counts every workflow query the client sends."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counter = self

        class Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                counter.queries.append(f"{input.id}:{input.query}")
                return await super().query_workflow(input)

        return Outbound(next)


@pytest.fixture(scope="module")
def counted(cluster: Cluster) -> tuple[IrisClient, QueryCounter]:
    """A client whose workflow queries are counted."""
    from temporalio.client import Client

    counter = QueryCounter()
    loop = _LoopThread()

    async def connect() -> AsyncIrisClient:
        temporal = await Client.connect(cluster.info.address, interceptors=[counter])
        return AsyncIrisClient(temporal, cluster.info.store_url)

    return IrisClient(loop.run(connect()), loop), counter


def fail_loudly(size: int) -> None:
    raise ValueError("x" * size)


def listed_once_settled(client: IrisClient, name: str, state: str | None = None, job_id: str = "") -> list[JobStatus]:
    """`list_jobs(name=..., state=...)` once visibility shows the job (`job_id`, else the newest) ended.

    Temporal's visibility store is written after the history, so for a few
    milliseconds after `wait` returns a list may still show the job running.
    """
    deadline = time.monotonic() + 10
    while True:
        listed = client.list_jobs(name=name, state=state)
        ended = [j for j in listed if j.state in TERMINAL and (j.job_id == job_id or not job_id)]
        if ended or time.monotonic() > deadline:
            return listed
        time.sleep(0.05)


def test_wait_and_list_read_visibility_not_workflows(counted: tuple[IrisClient, QueryCounter]) -> None:
    """`wait` (with progress) and `list_jobs` filtered by name, state and user send no workflow query."""
    client, counter = counted
    name = f"read-{uuid.uuid4().hex[:8]}"
    job = client.submit_command(["true"], name=name, resources=ResourceSpec(cpu=0.2, memory="64m", replicas=3))
    seen: list[JobState] = []
    counter.queries.clear()
    status = client.wait(job.job_id, timeout=120, on_progress=lambda s: seen.append(s.state))
    assert JobState.SUCCEEDED == status.state
    assert 3 == len(status.tasks)
    listed = listed_once_settled(client, name)
    assert [job.job_id] == [j.job_id for j in listed]
    assert JobState.SUCCEEDED == listed[0].state
    assert {"SUCCEEDED": 3} == listed[0].task_state_counts
    assert 3 == listed[0].num_tasks
    assert listed[0].finished_at
    assert [job.job_id] == [j.job_id for j in client.list_jobs(name=name, state="succeeded", user=getpass.getuser())]
    assert [] == client.list_jobs(name=name, state="RUNNING")
    assert [] == counter.queries
    assert seen and seen[-1] == JobState.SUCCEEDED


def test_list_jobs_names_a_bad_state(client: IrisClient) -> None:
    with pytest.raises(ValueError, match="state must be one of"):
        client.list_jobs(state="DONE")


def test_long_errors_are_cut_in_the_table_and_the_job(client: IrisClient) -> None:
    """A 50,000-character exception is kept as a few hundred characters, saying it was cut."""
    job = client.submit(fail_loudly, 50_000, resources=SMALL)
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert "characters cut" in status.tasks[0].error
    assert len(status.tasks[0].error) <= MAX_ERROR_CHARS
    assert len(status.error) <= MAX_JOB_ERROR_CHARS
    listed = listed_once_settled(client, "fail_loudly", state="FAILED", job_id=job.job_id)
    assert job.job_id in {j.job_id for j in listed}


def test_a_task_that_ends_at_once_still_records_running(client: IrisClient) -> None:
    """`true` exits before the agent's "started" signal can land; the task's record still shows RUNNING."""
    job = client.submit_command(["true"], resources=SMALL)
    job.wait(timeout=120)
    temporal = client._async.temporal
    handle = temporal.get_workflow_handle(task_workflow_id(job.job_id, 0), result_type=TaskResult)
    result = client._run(handle.result())
    states = [t.split("@")[0].split()[0] for t in result.transitions]
    assert ["ASSIGNED", "RUNNING", "SUCCEEDED"] == states


def test_cli_job_list_filters_and_names_a_bad_state(cluster: Cluster, client: IrisClient) -> None:
    """`iris job list --name N --state S` shows only matching jobs; a bad state is one line, exit 2."""
    name = f"cli-{uuid.uuid4().hex[:8]}"
    job = client.submit_command(["true"], name=name, resources=SMALL)
    job.wait(timeout=120)
    shown = subprocess.run([sys.executable, "-m", "iris", "job", "list", "--name", name, "--state", "succeeded"],
                           env=cluster.env, capture_output=True, text=True, timeout=60)
    assert 0 == shown.returncode, shown.stderr
    assert job.job_id in shown.stdout
    empty = subprocess.run([sys.executable, "-m", "iris", "job", "list", "--name", name, "--state", "FAILED"],
                           env=cluster.env, capture_output=True, text=True, timeout=60)
    assert job.job_id not in empty.stdout
    bad = subprocess.run([sys.executable, "-m", "iris", "job", "list", "--state", "DONE"],
                         env=cluster.env, capture_output=True, text=True, timeout=60)
    assert 2 == bad.returncode
    assert "state must be one of" in bad.stderr
    assert "Traceback" not in bad.stderr
