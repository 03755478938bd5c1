"""Determinism: every workflow history the e2e session produced replays against today's code.

Runs after the other e2e modules (alphabetical order), so it sees jobs, tasks,
gang retries, kills, timeouts, the scheduler and worker liveness. With
IRIS_RECORD_HISTORIES=DIR set, it also saves one history per workflow type
there; tests/test_replay_recorded.py replays those checked-in histories.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Replayer

from tests.support import Cluster, replay
from workflows.registry import ALL_WORKFLOWS


async def _replay_all(address: str) -> dict[str, int]:
    client = await Client.connect(address)
    replayer = Replayer(workflows=ALL_WORKFLOWS)
    counts: dict[str, int] = {}
    recorded: dict[str, int] = {}
    record = os.environ.get("IRIS_RECORD_HISTORIES")
    iris_types = ", ".join(f"'{w.__name__}'" for w in ALL_WORKFLOWS)  # each is registered under its class name
    async for wf in client.list_workflows(f"WorkflowType IN ({iris_types})"):  # not other tests' helpers
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        result = await replay(replayer, history)
        assert result is None or result.replay_failure is None, f"{wf.workflow_type} {wf.id}: {result.replay_failure}"
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


def test_every_history_replays_deterministically(cluster: Cluster) -> None:
    """Replaying every job, task, scheduler and worker history of this session raises no non-determinism."""
    counts = asyncio.run(_replay_all(cluster.info.address))
    assert {"JobWorkflow", "TaskWorkflow", "SchedulerWorkflow", "WorkerWorkflow"} <= set(counts)
