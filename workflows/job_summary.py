"""A big job's status in one small payload: a summary, with its task rows read by range.

Past MAX_TABLE_ROWS tasks, the job's query answer and result carry the job's fields and counts and
only the rows of the tasks that did not succeed (the first MAX_TABLE_ROWS of them): every row,
even compact, is ~2.3 MB as Temporal's JSON at 10,000 tasks with usage figures and ~5.8 MB at
25,000, against a 2 MB payload limit. The client reads the rows by range (`JOB_TASKS_QUERY`,
MAX_PAGE_ROWS at a time, binary protobuf compressed) when it needs them all. Pure functions: the
workflow and the client share them.
"""

from __future__ import annotations

import zlib

from activities.proto import cluster_pb2 as pb
from workflows.states import TaskState
from workflows.visibility import MAX_LISTED_ERRORS, MAX_TABLE_ROWS, compact_rows

MAX_PAGE_ROWS = 5_000
"""Rows per `job_tasks` answer: 5,000 rows with 300-character errors are ~1.9 MB uncompressed, so
even errors that do not compress keep one answer under the 2 MB payload limit."""


def summary_status(status: pb.JobStatus) -> pb.JobStatus:
    """The job as its query answers and its result returns: whole up to MAX_TABLE_ROWS tasks.

    Past that, a compact status (`compact_status`) whose rows are those of the tasks that did not
    succeed, the first MAX_TABLE_ROWS of them by task index; `is_summary` tells it from a whole table.
    """
    if len(status.tasks) <= MAX_TABLE_ROWS:
        return status
    out = pb.JobStatus()
    for name in status.DESCRIPTOR.fields_by_name:  # every field but the table (copying it whole costs ~40 ms)
        if name != "tasks":
            _copy_field(status, out, name)
    kept = [row for row in status.tasks if row.state != TaskState.SUCCEEDED][:MAX_TABLE_ROWS]
    out.tasks.extend(kept)
    out.compact = True
    compact_rows(out.job_id, out.tasks, MAX_LISTED_ERRORS)
    return out


def _copy_field(src: pb.JobStatus, dst: pb.JobStatus, name: str) -> None:
    field = src.DESCRIPTOR.fields_by_name[name]
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        getattr(dst, name).update(getattr(src, name))
    elif field.message_type is not None:
        getattr(dst, name).CopyFrom(getattr(src, name))
    else:
        setattr(dst, name, getattr(src, name))


def is_summary(status: pb.JobStatus) -> bool:
    """A status that leaves rows out (a summary), as opposed to a whole table, compact or not."""
    return status.compact and len(status.tasks) < status.num_tasks


def task_page(status: pb.JobStatus, start: int, stop: int) -> bytes:
    """Rows `start` to `stop` (at most MAX_PAGE_ROWS), compact, as zlib(binary JobStatus) for `job_tasks`."""
    start = max(0, start)
    stop = min(len(status.tasks), stop, start + MAX_PAGE_ROWS)
    page = pb.JobStatus(job_id=status.job_id, num_tasks=status.num_tasks, compact=True)
    page.tasks.extend(status.tasks[start:stop])
    compact_rows(page.job_id, page.tasks, MAX_PAGE_ROWS)  # every error the job kept
    return zlib.compress(page.SerializeToString(), 1)


def read_page(data: bytes) -> list[pb.TaskStatus]:
    return list(pb.JobStatus.FromString(zlib.decompress(data)).tasks)


def page_ranges(num_tasks: int) -> list[tuple[int, int]]:
    """The `job_tasks` ranges that read a table of `num_tasks` rows."""
    return [(start, min(num_tasks, start + MAX_PAGE_ROWS)) for start in range(0, num_tasks, MAX_PAGE_ROWS)]


def with_rows(summary: pb.JobStatus, rows: list[pb.TaskStatus]) -> pb.JobStatus:
    """`summary` with its table replaced by `rows` (every task's, read by range)."""
    out = pb.JobStatus()
    out.CopyFrom(summary)
    del out.tasks[:]
    out.tasks.extend(rows)
    return out
