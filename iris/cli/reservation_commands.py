"""`iris run --reserve SPEC` parsing and `iris reservation list`.

SPEC is one worker's worth of capacity, `KEY=VALUE` pairs separated by commas, with an optional
`xN` at the end to repeat it N times: `--reserve cpu=4,memory=16g x2` is written
`--reserve cpu=4,memory=16gx2`. Keys: cpu (cores), memory (like 16g), gpus, tpu (a variant);
a key left out takes the job default (1 cpu, 1g). The flag repeats, and
`--reserve-constraint` (the `--constraint` syntax) picks the workers it may be held on.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, iris_client, out
from iris.types import ResourceSpec
from iris.units import format_memory

if TYPE_CHECKING:
    from iris.client.reservation_requests import ReservationStatus

reservation_app = typer.Typer(
    help="Reservations: capacity a job holds for its tree of child jobs.", no_args_is_help=True
)

_COUNT = re.compile(r"^(?P<body>.*?)x(?P<count>\d+)$")
_KEYS = ("cpu", "memory", "gpus", "tpu")


def parse_reserve(spec: str) -> ResourceSpec:
    """`cpu=4,memory=16g[,gpus=1][,tpu=v5e-16][xN]` as a ResourceSpec with replicas=N; ValueError naming --reserve."""
    text = spec.strip()
    count = 1
    found = _COUNT.match(text)
    if found:
        text, count = found["body"], int(found["count"])
        if count < 1:
            raise ValueError(f"--reserve {spec!r}: the count after x must be at least 1")
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise ValueError(f"--reserve {spec!r}: expected KEY=VALUE, got {part!r} (e.g. cpu=4,memory=16gx2)")
        if key not in _KEYS:
            raise ValueError(f"--reserve {spec!r}: unknown key {key!r} (one of {', '.join(_KEYS)})")
        if key in values:
            raise ValueError(f"--reserve {spec!r}: {key} given twice")
        values[key] = value.strip()
    if not values:
        raise ValueError(f"--reserve {spec!r}: expected cpu=..,memory=.. (e.g. cpu=4,memory=16gx2)")
    try:
        gpus = int(values["gpus"]) if "gpus" in values else 0
    except ValueError:
        raise ValueError(f"--reserve {spec!r}: gpus must be an integer, got {values['gpus']!r}") from None
    try:
        return ResourceSpec(
            cpu=values.get("cpu", 1), memory=values.get("memory", "1g"), gpus=gpus, tpu=values.get("tpu"),
            replicas=count,
        )  # fmt: skip
    except ValueError as err:
        raise ValueError(f"--reserve {spec!r}: {str(err).removeprefix('resources.')}") from None


def _amount(cpu: float, memory: int) -> str:
    return f"{cpu:g} cpu, {format_memory(memory)}"


def _rows(r: ReservationStatus) -> list[tuple[str, ...]]:
    """One row per worker (the first carries the reservation), then one per lost worker awaiting a replacement."""
    lines: list[tuple[str, ...]] = []
    head = (r.reservation_id, r.job_id, f"{r.state} {r.held}/{r.entries}")
    for w in r.workers:
        free_cpu = max(0.0, w.held_cpu - w.used_cpu)
        free_mem = max(0, w.held_memory_bytes - w.used_memory_bytes)
        lines.append((*head, w.worker_id, _amount(w.used_cpu, w.used_memory_bytes), _amount(free_cpu, free_mem)))
        head = ("", "", "")
    for lost in r.lost_workers:
        lines.append((*head, f"{lost} (lost: awaiting replacement)", "", ""))
        head = ("", "", "")
    if not lines:
        lines.append((*head, "-", "", ""))
    if r.reason:
        lines.append(("", "", "", f"waiting: {r.reason}", "", ""))
    return lines


@reservation_app.command("list")
def reservation_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Each reservation: its id, its job, its workers with what its tree uses and what is free there.

    Read from what the scheduler publishes (its memo), not by querying it.
    """
    reservations = iris_client(temporal, store).list_reservations()
    if not reservations:
        out.print("no reservations")
        return
    table = Table("RESERVATION", "JOB", "STATE", "WORKER", "USED", "FREE")
    for r in reservations:
        for row in _rows(r):
            table.add_row(*row)
    out.print(table)
