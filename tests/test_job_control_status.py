"""Job control's values: a job's status (also a big job's summary), the options' checks, named ids, rules."""

from __future__ import annotations

from activities.proto import cluster_pb2 as pb
from iris.client.status_reads import _job_status
from workflows.jobs.job_summary import summary_status
from workflows.visibility import MAX_TABLE_ROWS


def test_a_big_jobs_summary_keeps_its_dependencies_and_cap() -> None:
    """Past MAX_TABLE_ROWS tasks the job answers a summary: its `after`, rule and cap are in it whole."""
    status = pb.JobStatus(job_id="big", state="RUNNING", num_tasks=MAX_TABLE_ROWS + 5, after=["a", "b"],
                          after_rule="ended", max_concurrent=8)  # fmt: skip
    for i in range(MAX_TABLE_ROWS + 5):
        status.tasks.add(task_index=i, task_id=f"big/task-{i}", state="PENDING")
    summary = summary_status(status)
    assert summary.compact
    shown = _job_status(summary)
    assert (("a", "b"), "ended", 8) == (shown.after, shown.after_rule, shown.max_concurrent)


def test_job_control_options_are_checked_at_construction() -> None:
    """`after` takes ids or handles (once each), at most 100; bad rules, caps and modes name their field."""
    import pytest

    from iris.client.job_control import MAX_DEPENDENCIES, parse_after, parse_if_exists, parse_max_concurrent
    from iris.client.submission import build_request

    class Handle:
        job_id = "b-2"

    assert ["a-1", "b-2"] == parse_after(["a-1", Handle(), "a-1"])
    with pytest.raises(ValueError, match=f"after must name at most {MAX_DEPENDENCIES} jobs, got 101"):
        parse_after([f"j{i}" for i in range(101)])
    with pytest.raises(ValueError, match=r"^after\[1\] must be a job id, got ''$"):
        parse_after(["a", ""])
    with pytest.raises(ValueError, match=r"^max_concurrent must be an integer >= 1, got True$"):
        parse_max_concurrent(True, coscheduled=False)
    with pytest.raises(ValueError, match=r"^if_exists must be one of new, reuse, fail, got 'maybe'$"):
        parse_if_exists("maybe", "x")
    req = build_request(after=["a-1"], after_rule="ended", max_concurrent=8)
    assert (["a-1"], "ended", 8) == (list(req.after), req.after_rule, req.max_concurrent)
    assert ("", 0) == (build_request().after_rule, build_request().max_concurrent)


def test_named_submits_derive_one_successor_id() -> None:
    """Two submits of a name after the same newest job derive the same id; another newest job, namespace or
    parent gives another (and a child's id stays under its parent's)."""
    from iris.client.idempotent import successor_id

    req = pb.JobRequest(name="Prep 2026/12/01", namespace="ana")
    first = successor_id(req, "")
    assert first == successor_id(pb.JobRequest(name="Prep 2026/12/01", namespace="ana"), "")
    assert first.startswith("prep-2026-12-01-")
    assert first != successor_id(req, first)
    assert first != successor_id(pb.JobRequest(name="Prep 2026/12/01", namespace="bo"), "")
    child = successor_id(pb.JobRequest(name="Prep 2026/12/01", namespace="ana", parent_job_id="root-1"), "")
    assert child.startswith("root-1/prep-2026-12-01-")


def test_a_dependency_rule_accepts_what_it_says() -> None:
    """`succeeded` accepts only SUCCEEDED; `ended` accepts every end state."""
    from workflows.jobs.job_dependencies import accepts, refusal, waiting_reason

    assert [True, False, False, False] == [accepts("succeeded", s) for s in ("SUCCEEDED", "FAILED", "KILLED", "GONE")]
    assert all(accepts("ended", s) for s in ("SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"))
    assert "waiting for jobs a, b and c to end (after_rule=ended)" == waiting_reason(["a", "b", "c"], "ended")
    assert "dependency a ended KILLED; after_rule=succeeded needs SUCCEEDED" == refusal("a", "KILLED", "")
