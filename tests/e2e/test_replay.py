"""Determinism: every workflow history the e2e session produced replays against today's code.

It first runs one job of each ending itself (success, failure after a retry, a gang broken by
one task, a kill), so it stands alone; run after other e2e modules in the same session it also
replays theirs (timeouts, waves, the scheduler and worker liveness). With
IRIS_RECORD_HISTORIES=DIR set, it also saves one history per workflow type
there; tests/test_replay_recorded.py replays those checked-in histories.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from temporalio.client import Client

from iris import CoschedulingConfig, IrisClient, JobState, ResourceSpec
from tests.support import Cluster, fetch_and_replay, wait_until
from workflows.registry import ALL_WORKFLOWS

SMALL = ResourceSpec(cpu=0.5, memory="256m")


async def _replay_all(address: str) -> dict[str, int]:
    client = await Client.connect(address)
    counts: dict[str, int] = {}
    recorded: dict[str, int] = {}
    record = os.environ.get("IRIS_RECORD_HISTORIES")
    iris_types = ", ".join(f"'{w.__name__}'" for w in ALL_WORKFLOWS)  # each is registered under its class name
    runs = [wf async for wf in client.list_workflows(f"WorkflowType IN ({iris_types})")]  # not other tests' helpers
    for wf, (history, failure) in zip(runs, await fetch_and_replay(client, runs), strict=True):
        assert not failure, f"{wf.workflow_type} {wf.id}: {failure}"
        counts[wf.workflow_type] = counts.get(wf.workflow_type, 0) + 1
        # Record a couple of each type *and* ending (completed, failed, still running...), so
        # every path a workflow can close by is in the fixtures.
        kind = f"{wf.workflow_type}-{wf.status.name.lower() if wf.status else 'unknown'}"
        recorded[kind] = recorded.get(kind, 0) + 1
        if record and recorded[kind] <= 2:
            name = f"{kind}-{recorded[kind]}.json"
            fixture = {"workflow_id": wf.id, "history": json.loads(history.to_json())}
            (Path(record) / name).write_text(json.dumps(fixture))
    return counts


def _one_job_of_each_ending(client: IrisClient) -> None:
    """Histories of every way a job ends: succeeded, failed after a retry, gang broken, killed."""
    done = client.submit_command(["true"], resources=SMALL)
    retried = client.submit_command(["sh", "-c", "exit 3"], resources=SMALL, max_retries_failure=1)
    gang = client.submit_command(
        ["sh", "-c", 'if [ "$IRIS_TASK_INDEX" = 0 ]; then exit 1; fi; sleep 300'],
        resources=ResourceSpec(cpu=1, memory="1g", replicas=4), coscheduling=CoschedulingConfig(group_by="tpu-name"),
    )  # fmt: skip
    killed = client.submit_command(["sleep", "300"], resources=SMALL)
    wait_until(lambda: killed.status().state == JobState.RUNNING, timeout=60, what="the job to kill runs")
    killed.terminate()
    ends = [job.wait(timeout=120, raise_on_failure=False).state for job in (done, retried, gang, killed)]
    assert [JobState.SUCCEEDED, JobState.FAILED, JobState.FAILED, JobState.KILLED] == ends


def test_every_history_replays_deterministically(cluster: Cluster, client: IrisClient) -> None:
    """Replaying every job, task, scheduler and worker history of this session raises no non-determinism."""
    _one_job_of_each_ending(client)
    counts = asyncio.run(_replay_all(cluster.info.address))
    assert {"JobWorkflow", "TaskWorkflow", "SchedulerWorkflow", "WorkerWorkflow"} <= set(counts)
