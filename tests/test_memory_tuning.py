"""A controller keeps freed memory, so the next scheduler run's state is built without new pages from the kernel."""

from __future__ import annotations

import json
import subprocess
import sys

# Builds and frees 200 MiB of 1 MiB blocks (as a run's state is built and let go), then builds it again, and says
# how many pages the second build had to get from the kernel (minor faults).
REBUILD = """
import json, resource, sys
from iris.controller.gc_tuning import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "tuned" else None
blocks = [bytearray(1 << 20) for _ in range(200)]
del blocks
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
blocks = [bytearray(1 << 20) for _ in range(200)]
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _rebuild(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", REBUILD, mode], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_second_build_reuses_what_the_first_freed() -> None:
    tuned, default = _rebuild("tuned"), _rebuild("default")
    assert tuned["kept"] is True
    pages = 200 * (1 << 20) // 4096
    assert int(default["faults"]) > pages // 2  # glibc's defaults hand the memory back, and take it again
    assert int(tuned["faults"]) < pages // 20
