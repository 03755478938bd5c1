"""Recorded histories of every workflow type replay against the current workflow code.

Runs never meet other code than the code that started them (Worker Versioning, docs/operators.md), so
the fixtures are recorded from the current code only: one history per workflow type, re-recorded after
a workflow change. They guard what still replays across builds (the auto-upgrading WorkerWorkflow and
SliceWorkflow) and that a run replays deterministically at all. Re-record with

    IRIS_RECORD_HISTORIES=DIR python -m pytest tests/e2e/test_jobs.py tests/e2e/test_replay.py
    IRIS_RECORD_HISTORIES=DIR python -m pytest tests/e2e/test_fleet.py   # slices and the autoscaler

and copy one `<Type>-*.json` of each type to tests/histories/<Type>.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from iris.controller.control_plane import controller_replayer
from workflows.registry import ALL_WORKFLOWS

HISTORIES = Path(__file__).parent / "histories"
TYPES = sorted(w.__name__ for w in ALL_WORKFLOWS)


@pytest.mark.parametrize("workflow_type", TYPES)
async def test_recorded_history_replays(workflow_type: str) -> None:
    """The recorded history of this workflow type replays without a non-determinism error."""
    recorded = json.loads((HISTORIES / f"{workflow_type}.json").read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], json.dumps(recorded["history"]))
    assert workflow_type == history.events[0].workflow_execution_started_event_attributes.workflow_type.name
    await controller_replayer().replay_workflow(history)


async def test_a_scheduler_run_whose_signals_a_query_split_replays() -> None:
    """A scheduler run recorded by a controller that took a query on a cold cache replays (issue: the
    scheduler stopped for good on its replay).

    In that run a restarted controller answered a query before the workflow task that followed, and the SDK
    applied the signals that had come since the last task (a registration and the new controller's
    `configure`) while answering it; the registration after them came with the task itself. So the two
    registrations were answered by two deliveries (events 155 and 161) where a replay, which sees all three
    signals in one task, had answered both in one. The `configure` barrier answers them the same way.
    """
    events = json.loads((HISTORIES / "scheduler-query-split.json").read_text())
    history = WorkflowHistory.from_json("iris-scheduler", json.dumps(events))
    delivered = [
        e.event_id for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "deliver_signals"
    ]  # fmt: skip
    assert [155, 161] == [i for i in delivered if 150 < i < 170]
    result = await controller_replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
