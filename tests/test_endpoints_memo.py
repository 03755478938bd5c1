"""Endpoints in a job's memo: one key per task, so a task's start or end upserts only its own key."""

from __future__ import annotations

from workflows.visibility import JobView, memo_changes


def test_endpoints_round_trip_through_the_memo() -> None:
    """What the job publishes is what `resolve` reads back, by name and task index."""
    view = JobView(state="RUNNING", endpoints={"http": {"0": "h0:20000", "1": "h1:20001"}, "actor": {"1": "h1:20002"}})
    memo = view.to_memo()
    assert {"http": "h1:20001", "actor": "h1:20002"} == memo["endpoints/1"]
    assert view == JobView.from_memo(memo)


def test_a_task_start_upserts_only_its_own_key_and_an_end_removes_it() -> None:
    """Counts and the other tasks' endpoints are not sent again; a task that ended has its key removed."""
    before = JobView(state="RUNNING", counts={"RUNNING": 2}, endpoints={"http": {"0": "h0:20000"}})
    started = JobView(state="RUNNING", counts={"RUNNING": 2}, endpoints={"http": {"0": "h0:20000", "1": "h1:20001"}})
    assert {"endpoints/1": {"http": "h1:20001"}} == memo_changes(before, started)
    ended = JobView(state="RUNNING", counts={"RUNNING": 1, "SUCCEEDED": 1}, endpoints={"http": {"1": "h1:20001"}})
    assert {"counts": {"RUNNING": 1, "SUCCEEDED": 1}, "endpoints/0": None} == memo_changes(started, ended)
