"""The Temporal UI's view of a job is Markdown built from the request and status (pure functions)."""

from __future__ import annotations

from activities.proto import cluster_pb2 as pb
from workflows.jobs.details import job_request_markdown, job_status_markdown


def test_request_markdown_is_a_table_that_survives_pipes_and_backticks() -> None:
    """Commands with `|` and backticks stay inside their table cell, and every option has a row."""
    req = pb.JobRequest(job_id="j-1", name="train", user="ana", replicas=4, coschedule_group_by="tpu-name",
                        tpu_variant="v5e-16", image="py:3.11", scheduling_timeout_seconds=30)
    req.entrypoint.command.argv.extend(["sh", "-c", "echo `date` | tee out"])
    req.resources.cpu_millis, req.resources.memory_bytes = 1500, 2 * 1024**3
    req.constraints.add(key="zone", op="NE", value=pb.AttributeValue(string_value="eu"))
    req.env["TOKEN"] = "secret"
    lines = job_request_markdown(req).splitlines()
    assert ["| | |", "|---|---|"] == lines[:2]
    assert all(line.count("|") == 3 for line in lines[2:]), lines
    assert "| **Tasks** | 4 x 1.5 cpu, 2 GiB, TPU v5e-16 |" in lines
    assert "| **Constraints** | `zone ≠ eu` |" in lines
    assert "| **Environment** | `TOKEN` |" in lines  # names only: values may be secrets
    assert "secret" not in "\n".join(lines)


def test_status_markdown_names_state_counts_errors_and_waiting() -> None:
    """The current details say the state, the task counts, the job's error and each failed task's error."""
    status = pb.JobStatus(state="FAILED", num_tasks=3, error="task 1 failed: exit code 2",
                          pending_reason="", task_state_counts={"SUCCEEDED": 2, "FAILED": 1})
    status.tasks.add(task_index=1, state="FAILED", attempt=2, error="exit code 2 | oops")
    text = job_status_markdown(status)
    assert text.startswith("**FAILED** — 3 tasks: 1 failed, 2 succeeded")
    assert "**Error:** task 1 failed: exit code 2" in text
    assert "| 1 | FAILED | 2 | exit code 2 ¦ oops |" in text.splitlines()
    pending = job_status_markdown(pb.JobStatus(state="PENDING", num_tasks=1, pending_reason="0/2 workers: 2 lack x"))
    assert "**Waiting:** 0/2 workers: 2 lack x" in pending
