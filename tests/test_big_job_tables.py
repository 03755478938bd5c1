"""A big job's task table fits in one payload, and the client reads it as if it were whole.

Past MAX_TABLE_ROWS tasks a job's query answer and result leave out what the
client can derive (task ids, result keys) and errors past the first
MAX_LISTED_ERRORS: whole, a 10,000-task table with 300-character errors was
~4.5 MB, and a job whose result passes Temporal's 2 MB payload limit never ends.
"""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

from temporalio.converter import DataConverter

from activities.contracts import result_blob_key, task_workflow_id
from activities.proto import cluster_pb2 as pb
from iris import ResourceSpec
from iris.client import AsyncIrisClient, _job_status
from iris.submission import build_request
from worker_agent.object_store import open_blob_store
from workflows.job_handover import pack_handover, unpack_handover
from workflows.job_waves import may_outgrow_history
from workflows.job_workflow import MAX_REPLICAS
from workflows.visibility import MAX_ERROR_CHARS, MAX_LISTED_ERRORS, MAX_TABLE_ROWS, compact_status

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


def test_the_largest_failing_job_fits_in_a_payload_with_its_first_errors() -> None:
    whole = _status("job-big", MAX_REPLICAS, "FAILED", error="Traceback: " + "x" * MAX_ERROR_CHARS)
    assert _payload_bytes(whole) > PAYLOAD_LIMIT  # what a job's result used to be
    compact = compact_status(whole)
    assert _payload_bytes(compact) < PAYLOAD_LIMIT // 2
    assert compact.compact and MAX_REPLICAS == len(compact.tasks)
    kept = [t.task_index for t in compact.tasks if t.error]
    assert list(range(MAX_LISTED_ERRORS)) == kept
    status = _job_status(compact)
    assert [task_workflow_id("job-big", i) for i in range(MAX_REPLICAS)] == [t.task_id for t in status.tasks]
    assert all(t.attempt == 2 and t.worker_id for t in status.tasks)


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
    """What a 10,000-task job carries into its next run: every row, with budgets and exit codes."""
    status = _status("job-big", MAX_REPLICAS, "RUNNING", error="Traceback: " + "x" * MAX_ERROR_CHARS)
    for row in status.tasks:
        row.worker_id = f"tpu-v5e-256-slice-{row.task_index % 500:04d}-w{row.task_index % 64}"
        row.failure_count, row.preemption_count, row.has_exit_code, row.exit_code = 1, 2, True, 1
    handover = pb.JobHandover(status=compact_status(status), open_tasks=range(9_000, MAX_REPLICAS),
                              next_task=MAX_REPLICAS)  # fmt: skip
    assert _payload_bytes(handover) > PAYLOAD_LIMIT * 3 // 4  # as Temporal's default JSON: near the limit
    packed = pack_handover(handover)
    assert _payload_bytes(packed) < PAYLOAD_LIMIT // 8
    assert handover == unpack_handover(packed)


def test_jobs_whose_budgets_allow_more_than_5000_attempts_hand_over() -> None:
    """Preemptions count: with the default budget of 100, a job of 50 tasks may hand over, one of 49 does not."""
    def hands_over(replicas: int, **budgets: int) -> bool:
        return may_outgrow_history(build_request(resources=ResourceSpec(replicas=replicas), **budgets))

    assert (hands_over(49), hands_over(50)) == (False, True)
    assert (hands_over(1, max_retries_failure=4_899), hands_over(1, max_retries_failure=4_900)) == (False, True)
    assert hands_over(401, max_retries_preemption=0)  # past one wave, whatever the budgets
    assert not hands_over(400, max_retries_preemption=0)
