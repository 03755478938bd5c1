"""Reservations on the client: checking `submit(reservation=..., reservation_constraints=...)` and reading them back.

A reservation is a list of `ResourceSpec`: each is one worker's worth of capacity (its
`replicas` repeats it), held on a concrete worker for the job's tree of descendant jobs while
the job runs (docs/reservations.md). `list_reservations` reads what the scheduler publishes in
its memo (one describe of the scheduler workflow, never a query).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from activities.contracts import RESERVATION_ENV, RESERVATIONS_MEMO, SCHEDULER_WORKFLOW_ID
from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_constraint
from iris.types import Constraint, ResourceSpec
from scheduler.types import Op

MAX_RESERVATION_ENTRIES = 1_000  # workers' worth per reservation: the scheduler's memo lists them


def add_reservation(
    req: pb.JobRequest,
    reservation: Any,
    reservation_constraints: Any,
    check_constraints: Callable[[Any], list[Constraint]],
) -> None:
    """Validate the reservation options and put them on `req`; a ValueError names the field.

    `check_constraints` is the submission's own constraint check (its messages say "constraints",
    rewritten here to "reservation_constraints").
    """
    if reservation is None:
        if reservation_constraints:
            raise ValueError("reservation_constraints: given without a reservation")
        return
    if isinstance(reservation, ResourceSpec):
        reservation = [reservation]
    if isinstance(reservation, (str, bytes)) or not isinstance(reservation, Sequence) or not reservation:
        raise ValueError("reservation must be a non-empty list of ResourceSpec, e.g. [ResourceSpec(cpu=4, memory='8g')]"
                         )  # fmt: skip
    inside = os.environ.get(RESERVATION_ENV)
    if inside:
        raise ValueError(f"reservation: this job would run inside reservation {inside}; reservations do not nest")
    variants = set()
    count = 0
    for i, spec in enumerate(reservation):
        if not isinstance(spec, ResourceSpec):
            raise ValueError(f"reservation[{i}] must be a ResourceSpec, got {type(spec).__name__}")
        if spec.cpu_millis == 0 and spec.memory_bytes == 0 and not spec.gpus and not spec.tpu:
            raise ValueError(f"reservation[{i}] reserves nothing: give it some cpu, memory, gpus or a tpu")
        count += spec.replicas
        if count > MAX_RESERVATION_ENTRIES:
            raise ValueError(f"reservation: at most {MAX_RESERVATION_ENTRIES} workers' worth, got {count} or more")
        if spec.tpu:
            variants.add(spec.tpu)
        for _ in range(spec.replicas):
            req.reservation.add(cpu_millis=spec.cpu_millis, memory_bytes=spec.memory_bytes, gpus=spec.gpus)
    if len(variants) > 1:
        raise ValueError(f"reservation: every entry must name the same tpu variant, got {', '.join(sorted(variants))}")
    try:
        constraints = check_constraints(reservation_constraints)
    except ValueError as err:
        text = str(err)
        raise ValueError("reservation_" + text if text.startswith("constraints") else text) from None
    if variants and not any(c.key == "tpu-topology" for c in constraints):
        constraints.append(Constraint("tpu-topology", Op.EQ, variants.pop()))
    for i, c in enumerate(constraints):
        if c.soft:
            raise ValueError(f"reservation_constraints[{i}]: a reservation is held where it must be; soft=True is "
                             "for a job's constraints")  # fmt: skip
        set_constraint(req.reservation_constraints.add(), c.key, c.op, c.value)


@dataclass(frozen=True)
class ReservedWorker:
    """One worker of a reservation: what the reservation holds there and what its tree uses of it."""

    worker_id: str
    held_cpu: float
    held_memory_bytes: int
    used_cpu: float
    used_memory_bytes: int
    held_gpus: int = 0
    used_gpus: int = 0
    held_tpus: int = 0
    used_tpus: int = 0


@dataclass(frozen=True)
class ReservationStatus:
    """A reservation as the scheduler last published it (`client.list_reservations()`)."""

    reservation_id: str
    job_id: str
    user: str
    state: str  # WAITING (not held yet) or HELD
    entries: int  # workers' worth asked for
    held: int  # entries held now (fewer than `entries` while a lost worker awaits replacement)
    workers: tuple[ReservedWorker, ...]
    lost_workers: tuple[str, ...]  # workers lost from it whose entries await a replacement
    reason: str  # why it (or a lost entry) waits; "" when whole

    @property
    def awaiting_replacement(self) -> bool:
        return bool(self.lost_workers)


def parse_published(items: Any) -> list[ReservationStatus]:
    """The scheduler's memo value as ReservationStatus values (tolerant of missing keys)."""
    out = []
    for item in items or []:
        workers = tuple(_worker(w) for w in item.get("workers") or [])
        out.append(
            ReservationStatus(
                reservation_id=str(item.get("id", "")),
                job_id=str(item.get("job", "")),
                user=str(item.get("user", "")),
                state=str(item.get("state", "")),
                entries=len(item.get("entries") or []),
                held=int(item.get("held", 0)),
                workers=workers,
                lost_workers=tuple(str(lost.get("worker", "")) for lost in item.get("lost") or []),
                reason=str(item.get("reason", "")),
            )
        )
    return out


def _worker(w: dict[str, Any]) -> ReservedWorker:
    held, used = w["held"], w["used"]
    return ReservedWorker(
        worker_id=str(w.get("worker", "")),
        held_cpu=held[0] / 1000, held_memory_bytes=int(held[1]),
        used_cpu=used[0] / 1000, used_memory_bytes=int(used[1]),
        held_gpus=int(held[2]), used_gpus=int(used[2]), held_tpus=int(held[3]), used_tpus=int(used[3]),
    )  # fmt: skip


async def read_published(temporal: Any) -> list[ReservationStatus]:
    """One describe of the scheduler workflow: the reservations its memo holds."""
    description = await temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).describe()
    return parse_published(await description.memo_value(RESERVATIONS_MEMO, default=None))
