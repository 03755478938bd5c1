"""What a job's status carries of its job control (dependencies, cap), also in a big job's summary."""

from __future__ import annotations

from activities.proto import cluster_pb2 as pb
from iris.client_status import _job_status
from workflows.job_summary import summary_status
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
