"""The scheduler's answers to the dashboard: one small answer per page, filtered and paged here.

The registry lives in the scheduler, so at 10,000 workers its whole table (every worker with its
running tasks: megabytes, 1.5 s to encode in a workflow task) is never sent: the workers page asks
for one filtered page (50 rows, a few running tasks each, plus counts and capacity per group) and a
worker's page for that worker with all its tasks. A page's answer walks the registry and the
placements once in plain Python (protobuf only for the rows sent): 20-50 ms at 10,000 workers and
20,000 running tasks on a loaded 2-core machine (the whole table took 1.5 s), a worker's 2-6 ms.
The queue page gets the summary and the last pass's snapshot in one answer, so a page waits for
the scheduler once and never for an encoding.

The pure parts (`workers_page`, `worker_status`) are functions of the state, tested without Temporal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.contracts import task_workflow_id
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import set_attr
    from scheduler.autoscale import SCALE_GROUP_ATTRIBUTE
    from workflows.scheduler.placement_index import Placement
    from workflows.scheduler.scheduler_state import SchedulerState, WorkerEntry

STATES = ("healthy", "lost", "cordoned", "busy", "idle")
RUNNING_SHOWN = 3  # running tasks named per row of the workers page; the worker's own page names all
MAX_LIMIT = 500
GROUP_ATTRIBUTES = (SCALE_GROUP_ATTRIBUTE, "tpu-name")
"""A worker's group for the capacity picture: its scale group, else its (fixed) slice."""
NO_GROUP = "other workers"


def worker_state(w: WorkerEntry) -> str:
    if not w.healthy:
        return "lost"
    return "cordoned" if w.cordoned else "healthy"


def _keeps(w: WorkerEntry, request: pb.DashboardWorkersRequest, busy: bool) -> bool:
    if request.text and request.text not in w.worker_id:
        return False
    state = request.state
    if state in ("healthy", "lost", "cordoned") and worker_state(w) != state:
        return False
    if state == "busy" and not busy:
        return False
    if state == "idle" and (busy or not w.healthy):
        return False
    if request.attribute:
        key, has_value, value = request.attribute.partition("=")
        if key not in w.attributes:
            return False
        if has_value and str(w.attributes[key]) != value:
            return False
    return True


class _Used:
    """What one worker has committed and the keys of the tasks it runs."""

    __slots__ = ("cpu_millis", "gpus", "memory_bytes", "tasks", "tpus")

    def __init__(self) -> None:
        self.cpu_millis = self.memory_bytes = self.gpus = self.tpus = 0
        self.tasks: list[str] = []


def _per_worker(placements: Iterable[Placement]) -> dict[str, _Used]:
    """worker id -> what it has committed and runs, in one pass over these placements."""
    out: dict[str, _Used] = {}
    for p in placements:
        key = task_workflow_id(p.job_id, p.task_index)
        used = out.get(p.worker_id)
        if used is None:
            used = out[p.worker_id] = _Used()
        used.cpu_millis += p.cpu_millis
        used.memory_bytes += p.memory_bytes
        used.gpus += p.gpus
        used.tpus += p.tpus
        used.tasks.append(key)
    return out


def _status(w: WorkerEntry, used: _Used | None, tasks: int | None) -> pb.WorkerStatus:
    """A worker as the pages show it, with its first `tasks` running tasks (all with None)."""
    status = pb.WorkerStatus(worker_id=w.worker_id, healthy=w.healthy, cordoned=w.cordoned)
    status.capacity.cpu_millis, status.capacity.memory_bytes = w.cpu_millis, w.memory_bytes
    status.capacity.gpus, status.capacity.tpus = w.gpus, w.tpus
    for key, value in w.attributes.items():
        set_attr(status.attributes[key], value)
    if used is not None:
        c = status.committed
        c.cpu_millis, c.memory_bytes, c.gpus, c.tpus = used.cpu_millis, used.memory_bytes, used.gpus, used.tpus
        keys = sorted(used.tasks)
        status.running_tasks.extend(keys if tasks is None else keys[:tasks])
    return status


def _group(w: WorkerEntry) -> str:
    for key in GROUP_ATTRIBUTES:
        if key in w.attributes:
            return str(w.attributes[key])
    return NO_GROUP


def workers_page(state: SchedulerState, request: pb.DashboardWorkersRequest) -> pb.DashboardWorkers:
    """The workers the request's filter keeps, sorted by id, one page of them; counts and groups of all.

    Every registered worker is counted and can be listed: lost ones (until the registry forgets them)
    and cordoned ones too, each with what it has committed and how many tasks it runs. One pass over
    the placements sums CPU per worker (busy or not, the groups' use); only the page's rows collect more.
    """
    cpu = {worker_id: used[0] for worker_id, used in state.placements.used.items()}  # kept, not added up
    get = cpu.get
    out = pb.DashboardWorkers()
    counts = {"healthy": 0, "cordoned": 0, "lost": 0}
    groups: dict[str, list[int]] = {}
    kept: list[WorkerEntry] = []
    for w in state.workers.values():
        counts[worker_state(w)] += 1
        if w.healthy:
            name = _group(w)
            g = groups.get(name)
            if g is None:
                g = groups[name] = [0, 0]
            g[0] += get(w.worker_id, 0)
            g[1] += w.cpu_millis
        if _keeps(w, request, w.worker_id in cpu):
            kept.append(w)
    kept.sort(key=lambda w: w.worker_id)
    offset = min(max(0, request.offset), len(kept))
    limit = min(max(0, request.limit), MAX_LIMIT)
    rows = kept[offset : offset + limit]
    shown = {w.worker_id for w in rows}
    per = _per_worker(state.placements.on_workers(shown))
    for w in rows:
        used = per.get(w.worker_id)
        out.workers.append(_status(w, used, RUNNING_SHOWN))
        out.running_counts.append(len(used.tasks) if used is not None else 0)
    out.matched, out.offset = len(kept), offset
    out.healthy, out.cordoned, out.lost = counts["healthy"], counts["cordoned"], counts["lost"]
    out.busy = sum(1 for worker_id in cpu if worker_id in state.workers)
    for name, (used_cpu, total) in sorted(groups.items()):
        out.groups.add(group=name, used_cpu_millis=used_cpu, cpu_millis=total)
    return out


def worker_status(state: SchedulerState, worker_id: str) -> pb.WorkerStatus:
    """One worker with every task it runs (an empty status, no id, for a worker the registry does not hold)."""
    w = state.workers.get(worker_id)
    if w is None:
        return pb.WorkerStatus()
    return _status(w, _per_worker(state.placements.on_workers([worker_id])).get(worker_id), None)


def queue_page(state: SchedulerState, summary: pb.ClusterSummary, snapshot: Callable[[], bytes]) -> pb.DashboardQueue:
    """The summary and the queue's snapshot; never an encoding of its own while work waits.

    While tasks wait, passes run every second and each keeps its input: `snapshot` gives that one even
    after the state changed (at most a pass old), so a query never spends the hundreds of ms an
    encoding costs at 100,000 tasks. With nothing pending there is no queue to send.
    """
    if not state.pending:
        return pb.DashboardQueue(summary=summary)
    return pb.DashboardQueue(summary=summary, snapshot=snapshot())
