"""The environment of a multi-slice gang's task: what JAX/MegaScale reads to join its slices.

`MEGASCALE_NUM_SLICES` and `MEGASCALE_SLICE_ID` follow from the task's index: a
gang of n tasks over k slices runs task i on slice `i // (n / k)`. The
coordinator is slice 0's first host, which the scheduler chose when it placed
the gang (`Assigned.coordinator`), on MegaScale's default port: one fixed
port, the same on every retry, until the worker allocates named ports.
"""

from __future__ import annotations

MEGASCALE_PORT = 8080  # MegaScale's default coordinator port


def megascale_env(num_slices: int, task_index: int, num_tasks: int, coordinator_host: str) -> dict[str, str]:
    """The MEGASCALE_* variables of one task; empty unless the task belongs to a gang of several slices."""
    if num_slices < 2 or num_tasks % num_slices:
        return {}
    env = {
        "MEGASCALE_NUM_SLICES": str(num_slices),
        "MEGASCALE_SLICE_ID": str(task_index // (num_tasks // num_slices)),
    }
    if coordinator_host:
        env["MEGASCALE_COORDINATOR_ADDRESS"] = f"{coordinator_host}:{MEGASCALE_PORT}"
    return env
