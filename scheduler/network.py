"""Ports and addresses of distributed tasks: which port each task gets, and who its peers are.

Pure (no I/O, no clock): the scheduler workflow calls it when it commits a pass, because only there
are all of a gang's placements known at once. Ports are handed out from each worker's range and
booked per *host address*, not per worker, since several workers may share one host (a local
cluster, one agent process simulating many hosts): a port is never held by two live tasks on one
host. What the scheduler cannot know is a port taken by a process outside Iris; a worker's range is
meant to be kept for Iris (the default, `DEFAULT_PORT_RANGE` in the contract module, lies below
Linux's ephemeral range).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

COORDINATOR_PORT = "jax-coordinator"
"""Task 0's port for the JAX coordinator (a name no user port can take: they have no '-')."""
MEGASCALE_PORT = "megascale-coordinator"
"""Task 0's port for the MegaScale coordinator of a multi-slice gang (slice 0's first host)."""
PORT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
MAX_PORT_NAMES = 16


def check_port_names(names: Sequence[str]) -> str:
    """Why these port names are not acceptable ("" when they are): each becomes IRIS_PORT_<NAME>."""
    if len(names) > MAX_PORT_NAMES:
        return f"ports: at most {MAX_PORT_NAMES} names, got {len(names)}"
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not PORT_NAME.fullmatch(name):
            return (
                f"ports: {name!r} is not a port name (a letter, then letters, digits or '_', "
                "at most 64 characters)"
            )
        if name.upper() in seen:
            return f"ports: {name!r} is given twice (names are case-insensitive: IRIS_PORT_{name.upper()})"
        seen.add(name.upper())
    return ""


def port_env_name(name: str) -> str:
    """The variable a task reads its port `name` from."""
    return f"IRIS_PORT_{name.upper()}"


class PortBook:
    """The ports live placements hold, per host address; hands out free ones round-robin.

    Each host keeps a cursor (the last port handed out), so a port just given back is the last one
    to be reused: a retried gang gets a fresh coordinator address, and a socket of the previous
    attempt lingering in TIME_WAIT does not stop the next one from binding.
    """

    def __init__(self, held: dict[str, set[int]], cursors: dict[str, int]) -> None:
        self._held = held  # address -> ports held there; taken over (updated in place)
        self.cursors = cursors  # the caller's: updated in place, carried in its state

    def take(self, address: str, start: int, end: int) -> int | None:
        """A port in [start, end] no live task on `address` holds, booked now; None when all are held."""
        held = self._held.setdefault(address, set())
        size = end - start + 1
        if size <= 0 or len(held) >= size:
            return None
        port = self.cursors.get(address, start - 1)
        for _ in range(size):
            port = port + 1 if start <= port < end else start
            if port not in held:
                held.add(port)
                self.cursors[address] = port
                return port
        return None

    def holds(self, address: str, port: int) -> bool:
        return port in self._held.get(address, ())


@dataclass(frozen=True)
class Member:
    """One placed task of a job, as the slice layout needs it."""

    task_index: int
    address: str
    group: Any  # the worker's `tpu-name` (None: not a TPU host)
    host_index: Any  # the worker's `tpu-worker-id` (None: unknown)


def slice_layout(members: Sequence[Member]) -> dict[int, tuple[list[str], int]]:
    """Per task on a TPU host: the addresses of its slice's hosts in host order, and its own index there.

    A slice is the tasks placed on workers sharing one `tpu-name`; host order is the workers'
    `tpu-worker-id` (task index where it is missing). Tasks on workers without a `tpu-name` get none.
    """
    slices: dict[Any, list[Member]] = {}
    for m in members:
        if m.group is not None:
            slices.setdefault(m.group, []).append(m)
    out: dict[int, tuple[list[str], int]] = {}
    for hosts in slices.values():
        hosts.sort(key=lambda m: (_number(m.host_index, m.task_index), m.task_index))
        addresses = [m.address for m in hosts]
        for position, m in enumerate(hosts):
            out[m.task_index] = (addresses, position)
    return out


def _number(value: Any, default: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return float(default)
    try:
        return float(value)
    except ValueError:
        return float(default)
