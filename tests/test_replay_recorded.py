"""Recorded workflow histories (tests/histories/) still replay against the current workflow code.

A change that makes old histories non-deterministic breaks running jobs on
upgrade; this catches it without a server. Re-record with:
IRIS_RECORD_HISTORIES=tests/histories python -m pytest tests/e2e/test_replay.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from workflows import ALL_WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_recorded_histories_exist() -> None:
    """Every workflow type has at least one recorded history to replay."""
    types = {p.name.rsplit("-", 1)[0] for p in HISTORIES}
    assert {"JobWorkflow", "TaskWorkflow", "SchedulerWorkflow", "WorkerWorkflow"} <= types


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    """The recorded history replays without a non-determinism error."""
    recorded = json.loads(path.read_text())  # noqa: ASYNC240 - a small fixture file
    history = WorkflowHistory.from_json(recorded["workflow_id"], json.dumps(recorded["history"]))
    await Replayer(workflows=ALL_WORKFLOWS).replay_workflow(history)
