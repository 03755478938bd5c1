"""Reading every worker through the scheduler's `workers` query, one page at a time.

The query answers a page of workers in id order (workflows/scheduler/scheduler_registration.py): the whole
fleet in one answer was past the 2 MB a query's answer may take at 10,000 workers. A page names the id the
next one starts after (`next_after`, empty on the last page).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from activities.proto import cluster_pb2 as pb

MAX_PAGES = 10_000  # a listing that never ends (it cannot: ids only grow along it) stops here


async def all_workers(ask: Callable[[str], Awaitable[pb.WorkerList]]) -> list[pb.WorkerStatus]:
    """Every worker, asking `ask(after)` for each page: `after` is "" for the first, then the last page's
    `next_after`. Workers registered or removed meanwhile are listed as each page found them."""
    workers: list[pb.WorkerStatus] = []
    after = ""
    for _ in range(MAX_PAGES):
        page = await ask(after)
        workers.extend(page.workers)
        if not page.next_after:
            break
        after = page.next_after
    return workers
