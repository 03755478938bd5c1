"""A job decodes its tasks' results by hand (children and TASK_ENDED signals); it must read what
Temporal's converter reads."""

from __future__ import annotations

import json

import pytest
from temporalio.common import RawValue
from temporalio.converter import DataConverter

from activities.contracts import TaskStarted
from workflows.job_table import read_task_result, read_task_started
from workflows.messages import TaskResult, task_result_from_json, task_started_from_json

RESULTS = [
    TaskResult(task_index=0, state="SUCCEEDED"),
    TaskResult(7, "FAILED", "w-3", 2, 1, 1, 137, "exit 137: killed", "results/j/7", False, 1 << 30, 1.5, 3.25,
               ["ASSIGNED@0 w-1", "RUNNING@0", "FAILED@0"]),
    TaskResult(3, "KILLED", exit_code=None, dispatch_failed=True, error="dispatch failed ✗"),
    TaskResult(4, "SUCCEEDED", exit_code=0, cpu_seconds=0.0, run_seconds=12.0),
]


@pytest.mark.parametrize("result", RESULTS)
def test_hand_decoding_matches_the_converter(result: TaskResult) -> None:
    """A result decodes to the same value either way, field by field (None exit codes too)."""
    converter = DataConverter.default.payload_converter
    payload = converter.to_payloads([result])[0]
    decoded = task_result_from_json(json.loads(payload.data))
    assert decoded == converter.from_payloads([payload], [TaskResult])[0] == result
    assert read_task_result(RawValue(payload)) == result


def test_missing_fields_default_and_unknown_ones_are_ignored() -> None:
    """A result from a build with fewer or more fields still decodes (as the converter does)."""
    assert task_result_from_json({"task_index": 2, "state": "SUCCEEDED", "future": 1}) == TaskResult(2, "SUCCEEDED")


@pytest.mark.parametrize(
    "started",
    [TaskStarted(0, 0, "w-1"), TaskStarted(12, 3, "host-7", {"coordinator": "10.0.0.7:8476", "http": "h:80"})],
)
def test_task_started_decodes_as_the_converter_does(started: TaskStarted) -> None:
    """The agent's TASK_STARTED signal (one per attempt) reads the same by hand as through the converter."""
    converter = DataConverter.default.payload_converter
    payload = converter.to_payloads([started])[0]
    assert task_started_from_json(json.loads(payload.data)) == converter.from_payloads([payload], [TaskStarted])[0]
    assert read_task_started(RawValue(payload)) == started
