"""The controller's memory, set for a scheduler holding hundreds of thousands of objects.

The garbage collector: Python's cyclic collector scans every tracked object in a full (generation 2) collection,
and runs one whenever enough new objects have survived, in whichever thread allocates next. In a controller
whose scheduler holds 10,000 workers and 100,000 placements, such a collection took ~0.1-0.2 s of a
scheduler workflow task; with these thresholds the scale bench's longest scheduler activation took
181 ms of CPU instead of 361 ms (docs/performance.md), for ~40% more peak memory.

The allocator: each scheduler run builds its whole state afresh from the carry, and at 30,000 workers the memory the
last run freed had mostly gone back to the kernel, so the new run touched new pages: 7,000-12,000 minor faults and
8-35 ms of kernel time in a load of ~100 ms. glibc keeps what is freed when asked (`keep_freed_memory`).
"""

from __future__ import annotations

import ctypes
import gc

THRESHOLDS = (50_000, 20, 100)  # Python's default is (700, 10, 10)
# glibc's mallopt parameters (malloc.h) and what the controller sets them to.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEEP_FREED_BYTES = 1 << 30  # freed memory at the heap's top kept up to this much, not handed back to the kernel
MMAP_FROM_BYTES = 32 << 20  # only blocks this big get memory maps of their own (glibc's largest threshold)


def tune_for_controller() -> None:
    """Collect young objects less often, and full collections far less often; and leave what the
    controller imported at start (the SDK, protobuf descriptors, Iris's modules: ~100,000 objects that
    live as long as the process) out of every later collection. Keep freed memory for the next run's state."""
    gc.set_threshold(*THRESHOLDS)
    gc.collect()
    gc.freeze()
    keep_freed_memory()


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse: True when it agreed; False where the C library is not glibc
    (musl, macOS), which keeps its own defaults. Freed blocks stay in the process and a new run's state is built in
    them rather than in pages the kernel must hand out again (the 30k bench's peak resident size: 437-438 MB with
    it, 436 MB without; one run with the same settings given by environment, 465 MB)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_FROM_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
