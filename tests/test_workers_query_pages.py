"""The scheduler's `workers` query answers in pages (workflows/scheduler/scheduler_registration.py).

At 10,000 workers x 100,000 placed tasks the whole fleet in one answer passed the 2 MB a query's answer may
take ("Blob data size exceeds limit"), and a query answered with a workflow task carried it into that task's
completion: the server terminated the scheduler (GrpcMessageTooLarge), seen twice in two scale-bench runs with
`iris worker list`-style queries going on."""

from __future__ import annotations

import asyncio

from activities.contracts import task_workflow_id
from activities.contracts.worker_pages import all_workers
from activities.proto import cluster_pb2 as pb
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_registration import WORKERS_PAGE_BYTES
from workflows.scheduler.scheduler_state import WorkerEntry
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

WORKERS, TASKS_PER_WORKER = 3_000, 10


def _big_fleet() -> SchedulerWorkflow:
    scheduler = SchedulerWorkflow()
    state = scheduler.core.state
    for i in range(WORKERS):
        worker_id = f"host-{i:05d}"
        state.workers[worker_id] = WorkerEntry(worker_id, "s", 64_000, 256 << 30, 0, 4, {"zone": f"z{i % 3}"})
        for t in range(TASKS_PER_WORKER):
            job_id = f"job-{i}-{t}"
            state.placements[task_workflow_id(job_id, 0)] = Placement(job_id, 0, 0, worker_id, 1_000, 1 << 30, 0, 0)
    return scheduler


def test_every_worker_is_listed_once_in_pages_far_below_the_payload_limit() -> None:
    scheduler = _big_fleet()
    pages: list[pb.WorkerList] = []

    async def ask(after: str) -> pb.WorkerList:
        pages.append(scheduler.workers(after))
        return pages[-1]

    listed = asyncio.run(all_workers(ask))
    assert len(pages) > 1  # the whole fleet would not fit one page
    assert all(page.ByteSize() < 2 * WORKERS_PAGE_BYTES < (2 << 20) for page in pages)
    assert [w.worker_id for w in listed] == sorted(scheduler.core.state.workers)  # each once, in id order
    assert "" == pages[-1].next_after and all(p.next_after == p.workers[-1].worker_id for p in pages[:-1])
    first = listed[0]
    assert TASKS_PER_WORKER == len(first.running_tasks)  # what is placed there comes with its worker
    assert TASKS_PER_WORKER * 1_000 == first.committed.cpu_millis
    assert 64_000 == first.capacity.cpu_millis
