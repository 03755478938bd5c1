"""A job's big command and environment are stored once, not copied into every task's history."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHistory

from activities.contracts import INLINE_LAUNCH_BYTES, launch_blob_key, task_workflow_id
from iris import IrisClient, JobState, ResourceSpec

SCRIPT = "import os, sys; print('sizes', len(os.environ['BIG']), len(sys.argv[1]), os.environ['SMALL'])"


def started_input_bytes(client: IrisClient, workflow_id: str) -> int:
    """Bytes of the input a workflow was started with, as its history holds them."""

    async def fetch() -> WorkflowHistory:
        return await client._async.temporal.get_workflow_handle(workflow_id).fetch_history()

    first = client._run(fetch()).events[0]
    return sum(len(p.data) for p in first.workflow_execution_started_event_attributes.input.payloads)


def test_a_big_env_and_argv_reach_every_task_but_are_stored_once(client: IrisClient) -> None:
    """8 KB of env and 3 KB of argv: each task sees them whole; each task's input stays small."""
    job = client.submit_command(
        ["python", "-c", SCRIPT, "a" * 3_000],
        env={"BIG": "x" * 8_000, "SMALL": "ok"},
        resources=ResourceSpec(cpu=0.2, memory="128m", replicas=3),
    )
    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    for i in range(3):
        assert ["sizes 8000 3000 ok"] == [line for line in client.fetch_task_logs(job.job_id, i) if "sizes" in line]
    assert client._async.blobs.exists(launch_blob_key(job.job_id))
    for i in range(3):
        assert started_input_bytes(client, task_workflow_id(job.job_id, i)) < INLINE_LAUNCH_BYTES
    assert started_input_bytes(client, job.job_id) < INLINE_LAUNCH_BYTES


def test_a_small_command_stays_inline(client: IrisClient) -> None:
    """Below the threshold nothing is stored apart: the task's input carries the command itself."""
    job = client.submit_command(["python", "-c", "print('inline')"], resources=ResourceSpec(cpu=0.2, memory="128m"))
    assert JobState.SUCCEEDED == job.wait(timeout=120).state
    assert not client._async.blobs.exists(launch_blob_key(job.job_id))
    assert "inline" in client.fetch_task_logs(job.job_id, 0)


def test_a_missing_launch_fails_the_task_saying_so(client: IrisClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the stored command and env cannot be read, the task fails with that reason, not a crash of the agent."""
    store = type(client._async.blobs)  # frozen: the client's store class, in this (the submitter's) process only
    real_put = store.put
    def put_all_but_launches(self: object, key: str, data: bytes) -> None:
        if not key.endswith("/launch"):
            real_put(self, key, data)

    monkeypatch.setattr(store, "put", put_all_but_launches)
    job = client.submit_command(["true"], env={"BIG": "x" * 8_000}, resources=ResourceSpec(cpu=0.2, memory="128m"))
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert "cannot read the job's command and environment" in status.tasks[0].error
    monkeypatch.undo()
    after = client.submit_command(["true"], resources=ResourceSpec(cpu=0.2, memory="128m"))
    assert JobState.SUCCEEDED == after.wait(timeout=120).state  # the agent carries on
