"""TPU variants: how many VMs (hosts) a slice has, so a coscheduled job can be checked at submit.

A coscheduled TPU job runs one task per VM of its slice; asking for another
number of replicas can never be placed (too many) or leaves hosts idle (too
few), so the submission path rejects it with `validate_coscheduled_tpu`.

The number after the generation counts TensorCores for v2/v3/v4/v5p (two per
chip, four chips per VM: `v4-16` is 8 chips on 2 VMs) and chips for
v5e/v6e ("lite" pods: one VM holds up to 8 chips for single-host shapes,
4 chips per VM for multi-host shapes: `v5e-16` is 4 VMs).
"""

from __future__ import annotations

import re

# generation -> (accelerator count per VM, sizes that exist)
_CORE_COUNTED: dict[str, tuple[int, tuple[int, ...]]] = {
    "v2": (8, (8, 32, 128, 256, 512)),
    "v3": (8, (8, 32, 64, 128, 256, 512, 1024, 2048)),
    "v4": (8, tuple(2**p for p in range(3, 13))),  # v4-8 .. v4-4096
    "v5p": (8, tuple(2**p for p in range(3, 14))),  # v5p-8 .. v5p-8192
}
_LITE_SIZES = (1, 4, 8, 16, 32, 64, 128, 256)
_ALIASES = {"v5litepod": "v5e", "v6litepod": "v6e"}
_VARIANT = re.compile(r"^(?P<gen>v\d+[a-z]*|v5litepod|v6litepod)-(?P<size>\d+)$")


def _known_variants() -> dict[str, int]:
    """Build the table variant -> VM count once, so lookups and error messages share it."""
    table: dict[str, int] = {}
    for generation, (per_vm, sizes) in _CORE_COUNTED.items():
        for size in sizes:
            table[f"{generation}-{size}"] = max(1, size // per_vm)
    for generation in ("v5e", "v6e"):
        for size in _LITE_SIZES:
            table[f"{generation}-{size}"] = 1 if size <= 8 else size // 4
    return table


TPU_VM_COUNTS: dict[str, int] = _known_variants()


def tpu_vm_count(variant: str) -> int:
    """Return the number of VMs (one task each) of a TPU variant such as "v5e-16"; ValueError if unknown."""
    normalized = variant.strip().lower() if isinstance(variant, str) else ""
    parsed = _VARIANT.match(normalized)
    if parsed is not None and parsed["gen"] in _ALIASES:
        normalized = f"{_ALIASES[parsed['gen']]}-{parsed['size']}"
    count = TPU_VM_COUNTS.get(normalized)
    if count is None:
        raise ValueError(
            f"unknown TPU variant {variant!r} for tpu topology: expected e.g. v4-16, v5e-16, v5p-32, v6e-8"
        )
    return count


def validate_coscheduled_tpu(topology: str, replicas: int, slices: int = 1) -> None:
    """Raise ValueError naming `replicas` unless a coscheduled job has one replica per VM of `slices` slices."""
    vms = tpu_vm_count(topology)
    expected = vms * slices
    if replicas != expected:
        per = "one task per VM" if slices == 1 else f"{vms} VMs x {slices} slices, one task per VM"
        raise ValueError(f"replicas must be {expected} for a coscheduled {topology} job ({per}), got {replicas}")
