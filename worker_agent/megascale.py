"""The environment of a multi-slice gang's task: what JAX/MegaScale reads to join its slices.

`MEGASCALE_NUM_SLICES` and `MEGASCALE_SLICE_ID` follow from the task's index: a
gang of n tasks over k slices runs task i on slice `i // (n / k)`. The
coordinator is slice 0's first host (where task 0 runs) and a port the scheduler
reserved there when it placed the gang (`TaskNetwork.megascale_coordinator`), so a
retried gang gets a fresh one. `distributed_env` adds these to a task's environment.
"""

from __future__ import annotations


def megascale_env(num_slices: int, task_index: int, num_tasks: int, coordinator: str) -> dict[str, str]:
    """The MEGASCALE_* variables of one task; empty unless the task belongs to a gang of several slices."""
    if num_slices < 2 or num_tasks % num_slices:
        return {}
    env = {
        "MEGASCALE_NUM_SLICES": str(num_slices),
        "MEGASCALE_SLICE_ID": str(task_index // (num_tasks // num_slices)),
    }
    if coordinator:
        env["MEGASCALE_COORDINATOR_ADDRESS"] = coordinator
    return env
