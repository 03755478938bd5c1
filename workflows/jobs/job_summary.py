"""A big job's status in one small payload: a summary, with its task rows read by range.

Past MAX_TABLE_ROWS tasks, the job's query answer and result carry the job's fields and counts and
only the rows of the tasks that did not succeed (the first MAX_TABLE_ROWS of them): every row,
even compact, is ~2.3 MB as Temporal's JSON at 10,000 tasks with usage figures and ~5.8 MB at
25,000, against a 2 MB payload limit. The client reads the rows by range (`JOB_TASKS_QUERY`, as many
as fit in MAX_PAGE_BYTES compressed: one answer at 25,000 rows of `true` tasks) when it needs them
all. Pure functions: the workflow and the client share them.
"""

from __future__ import annotations

import zlib

from activities.proto import cluster_pb2 as pb
from workflows.states import TaskState
from workflows.visibility import MAX_LISTED_ERRORS, MAX_TABLE_ROWS, compact_rows

MAX_PAGE_ROWS = 25_000
"""Rows one `job_tasks` answer holds at most (~200 KB compressed at 25,000 rows of `true` tasks)."""
MAX_PAGE_BYTES = 1_000_000
"""What one `job_tasks` answer holds at most, compressed: fewer rows when their errors do not compress."""


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
    elif field.is_repeated:  # e.g. `after`: a list is extended, never assigned
        getattr(dst, name).extend(getattr(src, name))
    elif field.message_type is not None:
        getattr(dst, name).CopyFrom(getattr(src, name))
    else:
        setattr(dst, name, getattr(src, name))


def is_summary(status: pb.JobStatus) -> bool:
    """A status that leaves rows out (a summary), as opposed to a whole table, compact or not."""
    return status.compact and len(status.tasks) < status.num_tasks


def task_page(status: pb.JobStatus, start: int, stop: int) -> bytes:
    """Rows from `start` towards `stop`, compact, as zlib(binary JobStatus) for `job_tasks`: at most
    MAX_PAGE_ROWS, and fewer (in proportion, so once or twice more) until they fit in MAX_PAGE_BYTES."""
    start = max(0, start)
    count = min(len(status.tasks), stop, start + MAX_PAGE_ROWS) - start
    while True:
        page = pb.JobStatus(job_id=status.job_id, num_tasks=status.num_tasks, compact=True)
        page.tasks.extend(status.tasks[start : start + max(0, count)])
        compact_rows(page.job_id, page.tasks, len(page.tasks))  # every error the job kept
        data = zlib.compress(page.SerializeToString(), 1)
        if len(data) <= MAX_PAGE_BYTES or count <= 1:
            return data
        count = min(count - 1, int(count * MAX_PAGE_BYTES / len(data) * 0.9))


def read_page(data: bytes) -> list[pb.TaskStatus]:
    return list(pb.JobStatus.FromString(zlib.decompress(data)).tasks)


def with_rows(summary: pb.JobStatus, rows: list[pb.TaskStatus]) -> pb.JobStatus:
    """`summary` with its table replaced by `rows` (every task's, read by range)."""
    out = pb.JobStatus()
    out.CopyFrom(summary)
    del out.tasks[:]
    out.tasks.extend(rows)
    return out
