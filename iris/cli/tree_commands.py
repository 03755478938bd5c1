"""The CLI's view of job trees: `iris job list --tree` and `iris job logs JOB --children`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from activities.contracts import parent_job_of
from iris.cli.log_output import LogFollower, LogPrinter
from iris.types import JobStatus

if TYPE_CHECKING:
    from iris.client.iris_client import IrisClient

FOLLOW_POLL_SECONDS = 1.0


def tree_order(jobs: Sequence[JobStatus]) -> list[tuple[int, JobStatus]]:
    """Jobs with their depth, each child right after its parent when both are listed (else where it was).

    Siblings keep the listing's order (newest first); a job whose parent is not listed is shown as
    a root of its own.
    """
    listed = {j.job_id for j in jobs}
    children: dict[str, list[JobStatus]] = {}
    roots: list[JobStatus] = []
    for j in jobs:
        parent = j.parent_job_id or parent_job_of(j.job_id)
        if parent and parent in listed:
            children.setdefault(parent, []).append(j)
        else:
            roots.append(j)
    out: list[tuple[int, JobStatus]] = []

    def walk(job: JobStatus, depth: int) -> None:
        out.append((depth, job))
        for child in children.get(job.job_id, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return out


def tree_label(depth: int, job: JobStatus) -> str:
    """A job's id as a tree row shows it: indented, and below its parent only its own part of the id."""
    if depth == 0:
        return job.job_id
    return "  " * (depth - 1) + "└ " + job.job_id.rsplit("/", 1)[-1]


class _JobPrinter:
    """One job's tasks written to a shared printer, each line labelled `JOB/task-i` instead of `i`."""

    def __init__(self, printer: LogPrinter, job_id: str) -> None:
        self.printer = printer
        self.job_id = job_id

    def write(self, task_index: int, data: bytes) -> None:
        label: Any = f"{self.job_id}/task-{task_index}"  # LogPrinter formats the key it is given
        self.printer.write(label, data)

    def flush(self) -> None:
        self.printer.flush()

    def end(self) -> None:
        self.printer.end()


def print_tree_logs(
    client: IrisClient, job_id: str, stream: IO[Any], *, follow: bool, since: float | None, tail: int | None,
) -> None:
    """The logs of `job_id` and every job below it, each line labelled with its job and task.

    Following, jobs started meanwhile are picked up at each poll, until every listed job has ended.
    """
    followers: dict[str, LogFollower] = {}
    with LogPrinter(stream, prefix=True) as printer:
        while True:
            jobs = [client.job_status(job_id), *reversed(client.list_jobs(limit=10_000, under=job_id))]
            for job in jobs:
                if job.job_id not in followers:
                    followers[job.job_id] = LogFollower(
                        client.log_store, job.job_id, _JobPrinter(printer, job.job_id),  # type: ignore[arg-type]
                        since=since, tail=tail,
                    )
                followers[job.job_id].poll(job.num_tasks, final=not follow or job.done)
            if not follow or all(j.done for j in jobs):
                return
            time.sleep(FOLLOW_POLL_SECONDS)
