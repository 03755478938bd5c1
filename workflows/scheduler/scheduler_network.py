"""The scheduler's part in distributed jobs: ports booked with each placement, and each task's network.

Pure functions of the scheduler's state (no Temporal calls), run by the commit (scheduler_queue)
right after a job's places are booked: only then are all of a gang's hosts known, so the
coordinator's address and each TPU slice's host list can be given to every task before it starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from activities.contracts import TaskNetwork, task_workflow_id
from activities.proto import cluster_pb2 as pb
from scheduler.network import COORDINATOR_PORT, MEGASCALE_PORT, Member, PortBook, slice_layout
from workflows.messages import SchedulingSpec
from workflows.scheduler.scheduler_state import SchedulerState

MAX_ANNOUNCED_HOSTS = 25_000
"""Slice host names per announcement batch (~400 KB): every task of an N-host gang carries its slice's
N names, so a 1,000-host gang's assignments (1,000,000 names) go out over several batches."""
TPU_NAME = "tpu-name"  # a worker with this attribute is a TPU host; its value names its slice
TPU_WORKER_ID = "tpu-worker-id"  # the host's index in its slice


def needs_network(spec: SchedulingSpec) -> bool:
    """Whether the job's tasks get ports or a coordinator (a job of one task without ports does not)."""
    return bool(spec.ports) or spec.coordinator


def port_book(state: SchedulerState) -> PortBook:
    """The ports every live placement holds, by its worker's host address (read from `state.ported`)."""
    held: dict[str, set[int]] = {}
    placements, workers = state.placements, state.workers
    gone = []
    for key in state.ported:
        p = placements.get(key)
        if p is None or not p.ports:
            gone.append(key)
            continue
        worker = workers.get(p.worker_id)
        if worker is not None:
            ports = held.get(worker.address)
            if ports is None:
                held[worker.address] = set(p.ports.values())
            else:
                ports.update(p.ports.values())
    state.ported.difference_update(gone)
    return PortBook(held, state.port_cursors)


def book_ports(
    state: SchedulerState, book: PortBook, spec: SchedulingSpec, placed: Sequence[pb.SchedulingAssignment]
) -> dict[int, dict[str, int]]:
    """Ports for each placed task (task index -> name -> port); a task whose host has none left is missing."""
    out: dict[int, dict[str, int]] = {}
    for a in placed:
        worker = state.workers[a.worker_id]
        names = list(spec.ports)
        if spec.coordinator and a.task_index == 0:
            names.append(COORDINATOR_PORT)
        if spec.num_groups > 1 and a.task_index == 0:
            names.append(MEGASCALE_PORT)  # task 0 runs on slice 0's first host
        ports: dict[str, int] = {}
        for name in names:
            port = book.take(worker.address, *worker.port_range)
            if port is None:
                break
            ports[name] = port
        if len(ports) == len(names):
            out[a.task_index] = ports
    return out


def task_networks(
    state: SchedulerState, job_id: str, spec: SchedulingSpec, placed: Sequence[pb.SchedulingAssignment]
) -> dict[int, TaskNetwork]:
    """What each just-placed task needs to know: its address and ports, the coordinators, its TPU slice.

    The coordinator is task 0's placement as it stands: for a gang, placed in this same commit; for
    a job that is not coscheduled, whenever task 0 was placed ("" while it waits for a place).
    """
    coordinator = megascale = ""
    zero = state.placements.get(task_workflow_id(job_id, 0))
    host = state.workers.get(zero.worker_id) if zero is not None else None
    if zero is not None and host is not None:
        if spec.coordinator and COORDINATOR_PORT in zero.ports:
            coordinator = f"{host.address}:{zero.ports[COORDINATOR_PORT]}"
        if spec.num_groups > 1 and MEGASCALE_PORT in zero.ports:
            megascale = f"{host.address}:{zero.ports[MEGASCALE_PORT]}"
    layout: dict[int, tuple[list[str], int]] = {}
    if spec.group_by:
        members = []
        for a in placed:
            w = state.workers[a.worker_id]
            members.append(Member(a.task_index, w.address, w.attributes.get(TPU_NAME), w.attributes.get(TPU_WORKER_ID)))
        layout = slice_layout(members)
    out: dict[int, TaskNetwork] = {}
    for a in placed:
        placement = state.placements[task_workflow_id(job_id, a.task_index)]
        hosts, position = layout.get(a.task_index, ([], -1))
        out[a.task_index] = TaskNetwork(
            address=state.workers[a.worker_id].address,
            ports=dict(placement.ports),  # task 0's include the coordinator's (published as an endpoint)
            coordinator=coordinator,
            slice_hosts=hosts,
            slice_host_index=position,
            megascale_coordinator=megascale,
        )
    return out


def announce_batches(outgoing: Sequence[Any], most: int) -> Iterator[list[Any]]:
    """`outgoing` ((Delivery, ...) pairs) in batches of at most `most` deliveries and MAX_ANNOUNCED_HOSTS
    slice host names, in order, so no batch's payload nears Temporal's 2 MB limit."""
    batch: list[Any] = []
    hosts = 0
    for item in outgoing:
        network = getattr(item[0].arg, "network", None)
        weight = len(network.slice_hosts) if network is not None else 0
        if batch and (len(batch) >= most or hosts + weight > MAX_ANNOUNCED_HOSTS):
            yield batch
            batch, hosts = [], 0
        batch.append(item)
        hosts += weight
    if batch:
        yield batch
