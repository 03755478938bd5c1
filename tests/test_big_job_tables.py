"""A big job's status fits in one payload, and the client reads it as if it were whole.

Past MAX_TABLE_ROWS tasks a job's query answer and result are a summary: the job's fields and
counts and the rows of the tasks that did not succeed; the client reads every row by range
(`job_tasks`). Whole, a 10,000-task table with 300-character errors was ~4.5 MB, compact rows
with usage figures ~2.3 MB at 10,000 tasks and ~5.8 MB at 25,000, and a job whose result passes
Temporal's 2 MB payload limit never ends. The table a job hands over to its next run is compact
and compressed.
"""

from __future__ import annotations

import asyncio
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from temporalio.converter import DataConverter

from activities.contracts import result_blob_key, task_workflow_id
from activities.proto import cluster_pb2 as pb
from iris import JobFailedError, ResourceSpec
from iris.cli.main import listed_tasks
from iris.client.async_client import AsyncIrisClient
from iris.client.status_reads import _job_status
from iris.client.submission import build_request
from worker_agent.object_store import open_blob_store
from workflows.jobs.job_handover import pack_handover, unpack_handover
from workflows.jobs.job_summary import (
    MAX_PAGE_BYTES,
    is_summary,
    read_page,
    summary_status,
    task_page,
    with_rows,
)
from workflows.jobs.job_waves import may_outgrow_history
from workflows.jobs.job_workflow import MAX_REPLICAS
from workflows.visibility import MAX_ERROR_CHARS, MAX_LISTED_ERRORS, MAX_TABLE_ROWS, compact_status, expand_row

PAYLOAD_LIMIT = 2 * 1024 * 1024


def _status(job_id: str, tasks: int, state: str, error: str = "", callable_: bool = False) -> pb.JobStatus:
    st = pb.JobStatus(job_id=job_id, state=state, num_tasks=tasks)
    for i in range(tasks):
        st.tasks.add(task_index=i, task_id=task_workflow_id(job_id, i), state=state, attempt=2,
                     worker_id=f"tpu-abcdef12-{i % 4}", error=error,
                     result_blob=result_blob_key(job_id, i, 2) if callable_ else "")  # fmt: skip
    return st


def _payload_bytes(value: Any) -> int:
    return len(DataConverter.default.payload_converter.to_payloads([value])[0].data)


def _with_usage(status: pb.JobStatus) -> pb.JobStatus:
    """Rows as a long-running job's are: a worker id of a big fleet, budgets, exit codes and usage figures."""
    for row in status.tasks:
        row.worker_id = f"tpu-v5e-256-slice-{row.task_index % 500:04d}-w{row.task_index % 64}"
        row.failure_count, row.preemption_count, row.has_exit_code, row.exit_code = 1, 2, True, 1
        row.peak_memory_bytes, row.cpu_seconds, row.duration_seconds = 123_456_789, 1234.5, 3456.7
    return status


def test_a_failing_job_of_25000_tasks_answers_a_summary_with_its_first_errors() -> None:
    """The summary has at most MAX_TABLE_ROWS rows, so its size does not grow past 2,000 tasks."""
    tasks = 25_000
    whole = _with_usage(_status("job-big", tasks, "FAILED", error="Traceback: " + "x" * MAX_ERROR_CHARS))
    assert _payload_bytes(compact_status(whole)) > PAYLOAD_LIMIT  # what a job's result used to be
    summary = summary_status(whole)
    assert _payload_bytes(summary) < PAYLOAD_LIMIT // 2  # ~0.5 MB, whatever the size of the job
    assert is_summary(summary) and (summary.num_tasks, summary.state) == (tasks, "FAILED")
    assert list(range(MAX_TABLE_ROWS)) == [t.task_index for t in summary.tasks]
    assert list(range(MAX_LISTED_ERRORS)) == [t.task_index for t in summary.tasks if t.error]
    status = _job_status(summary)
    assert [task_workflow_id("job-big", i) for i in range(MAX_TABLE_ROWS)] == [t.task_id for t in status.tasks]
    assert "task 0: Traceback" in str(JobFailedError(status))


def test_a_summary_keeps_the_rows_of_the_tasks_that_did_not_succeed() -> None:
    """25,000 tasks, three of them not done: the answer is those three rows and the counts."""
    st = _with_usage(_status("job-big", 25_000, "SUCCEEDED"))
    for i, state in ((7, "FAILED"), (12_345, "RUNNING"), (24_999, "PENDING")):
        st.tasks[i].state, st.tasks[i].error = state, f"task {i}: {state}"
    st.task_state_counts.update({"SUCCEEDED": 24_997, "FAILED": 1, "RUNNING": 1, "PENDING": 1})
    summary = summary_status(st)
    assert [(7, "FAILED"), (12_345, "RUNNING"), (24_999, "PENDING")] == [(t.task_index, t.state) for t in summary.tasks]
    assert dict(st.task_state_counts) == dict(summary.task_state_counts)
    assert "task 7: FAILED" == _job_status(summary).tasks[0].error


def test_iris_job_status_lists_a_big_jobs_counts_and_the_tasks_that_did_not_succeed() -> None:
    st = _status("job-big", 25_000, "SUCCEEDED")
    st.tasks[7].state, st.tasks[9].state = "FAILED", "KILLED"
    st.task_state_counts.update({"SUCCEEDED": 24_998, "FAILED": 1, "KILLED": 1})
    status = _job_status(st)
    shown, note = listed_tasks(status, all_tasks=False)
    assert [7, 9] == [t.task_index for t in shown]
    assert "tasks: 25,000 (1 FAILED, 1 KILLED, 24,998 SUCCEEDED); listed: 2 that did not succeed" in note
    assert (status.tasks, "") == listed_tasks(status, all_tasks=True)
    small = _job_status(_status("job-small", MAX_TABLE_ROWS, "SUCCEEDED"))
    assert (small.tasks, "") == listed_tasks(small, all_tasks=False)


def _read_by_range(st: pb.JobStatus) -> list[pb.TaskStatus]:
    """As the client reads a summary's rows: each answer from where the previous one ended."""
    rows: list[pb.TaskStatus] = []
    while len(rows) < st.num_tasks:
        rows.extend(read_page(task_page(st, len(rows), st.num_tasks)))
    return rows


def test_the_client_reads_every_row_of_a_summary_by_range() -> None:
    """The rows read by range make the whole table again, and the client sees every task as if whole."""
    st = _with_usage(_status("job-big", 25_000, "SUCCEEDED", callable_=True))
    st.tasks[3].error = "flaky"
    rows = _read_by_range(st)
    whole = with_rows(summary_status(st), rows)
    assert not is_summary(whole)
    status = _job_status(whole)
    assert [task_workflow_id("job-big", i) for i in range(25_000)] == [t.task_id for t in status.tasks]
    expected = _job_status(st)
    assert expected.tasks == status.tasks
    assert [expand_row("job-big", True, r)[1] for r in whole.tasks] == [r.result_blob for r in st.tasks]


def test_one_answer_of_rows_stays_under_the_payload_limit_even_when_errors_do_not_compress() -> None:
    """25,000 rows of `true` tasks come in one answer; rows whose errors do not compress in several."""
    st = _with_usage(_status("job-big", 25_000, "SUCCEEDED", callable_=True))
    assert 25_000 == len(read_page(task_page(st, 0, 25_000)))
    del st.tasks[8_000:]
    st.num_tasks = 8_000
    for row in st.tasks:
        row.error = os.urandom(MAX_ERROR_CHARS // 2).hex()  # 300 characters zlib cannot shrink much
    answers = [len(task_page(st, start, 8_000)) for start in range(0, 8_000, 2_000)]
    assert max(answers) <= MAX_PAGE_BYTES < PAYLOAD_LIMIT
    rows = _read_by_range(st)
    assert [r.error for r in rows] == [r.error for r in st.tasks]  # every error the job kept


def test_a_table_of_up_to_max_table_rows_is_answered_whole() -> None:
    st = _status("job-small", MAX_TABLE_ROWS, "FAILED", error="boom", callable_=True)
    assert compact_status(st) is st
    assert not st.compact


def test_results_of_a_compact_callable_job_are_read_from_the_derived_keys(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    blobs = open_blob_store(store)
    n = MAX_TABLE_ROWS + 5
    for i in range(n):
        blobs.put(result_blob_key("job-fn", i, 2), pickle.dumps(i * i))
    client = AsyncIrisClient(None, store)  # type: ignore[arg-type]  # a finished job is read from cache
    client._results["job-fn"] = compact_status(_status("job-fn", n, "SUCCEEDED", callable_=True))
    assert [i * i for i in range(n)] == asyncio.run(client.results("job-fn"))
    client._results["job-cmd"] = compact_status(_status("job-cmd", n, "SUCCEEDED"))
    assert [None] * n == asyncio.run(client.results("job-cmd"))  # a command's tasks return nothing


def test_a_job_hands_over_its_largest_table_far_below_the_payload_limit() -> None:
    """What the largest job carries into its next run: every row, with budgets, exit codes and usage."""
    tasks = MAX_REPLICAS
    status = _with_usage(_status("job-big", tasks, "RUNNING", error="Traceback: " + "x" * MAX_ERROR_CHARS))
    handover = pb.JobHandover(status=compact_status(status), open_tasks=range(tasks - 1_000, tasks),
                              next_task=tasks)  # fmt: skip
    assert handover.ByteSize() > 3 * PAYLOAD_LIMIT  # even as binary protobuf; Temporal's default JSON is larger
    packed = pack_handover(handover)
    assert _payload_bytes(packed) < PAYLOAD_LIMIT // 2
    assert handover == unpack_handover(packed)


def test_a_job_past_the_limit_is_refused_naming_replicas() -> None:
    with pytest.raises(ValueError, match=rf"^resources.replicas must be at most {MAX_REPLICAS:,} .*got 100001$"):
        build_request(resources=ResourceSpec(replicas=MAX_REPLICAS + 1))
    assert build_request(resources=ResourceSpec(replicas=25_000)).replicas == 25_000


def test_jobs_whose_budgets_allow_more_than_5000_attempts_hand_over() -> None:
    """Preemptions count: with the default budget of 100, a job of 50 tasks may hand over, one of 49 does not."""
    def hands_over(replicas: int, **budgets: Any) -> bool:
        return may_outgrow_history(build_request(resources=ResourceSpec(replicas=replicas), **budgets))

    assert (hands_over(49), hands_over(50)) == (False, True)
    assert (hands_over(1, max_retries_failure=4_899), hands_over(1, max_retries_failure=4_900)) == (False, True)
    assert hands_over(401, max_retries_preemption=0)  # past one wave, whatever the budgets
    assert not hands_over(400, max_retries_preemption=0)
