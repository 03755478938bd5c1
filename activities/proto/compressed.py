"""The one compression of Iris's large binary payloads: the scheduler's snapshot, plan and carry, a job's handover.

Zstandard at level 1: against zlib at level 1 on a 30,000-worker x 300,000-task carry, 4-5x faster to write
(6 against 26 ms), 3x faster to read (2.5 against 8.4 ms) and half the size (0.5 against 1.0 MiB), measured
side by side (docs/performance.md). Readers also take zlib, which builds before this one wrote: a scheduler's
run continues as new onto a new build with the old build's carry (docs/architecture.md, "Changing a workflow").
A frame says which it is by its first bytes. A job's task pages (workflows/jobs/job_summary.py) stay zlib: clients
read them, and a client installed before this build reads zlib only.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import zstandard

LEVEL = 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first four bytes (RFC 8878); a zlib stream starts 0x78


def compress(data: bytes) -> bytes:
    """One zstd frame holding `data` (its size in the frame's header: `decompress` needs no bound)."""
    return zstandard.compress(data, LEVEL)


def decompress(data: bytes, what: str = "payload") -> bytes:
    """What `compress` (or an earlier build's zlib) wrote; a ValueError naming `what` when it is neither."""
    try:
        if data.startswith(ZSTD_MAGIC):
            return zstandard.decompress(data)
        return zlib.decompress(data)
    except (zstandard.ZstdError, zlib.error) as e:
        raise ValueError(f"the {what} does not decompress: {e}") from e


def content_size(data: bytes) -> int:
    """What `decompress` returns, in bytes, read from the frame's header (a zstd frame written here says it); for
    a frame that does not say, its own size."""
    if data.startswith(ZSTD_MAGIC):
        size = zstandard.frame_content_size(data)
        if size >= 0:
            return int(size)
    return len(data)


def split(data: bytes, names: Sequence[str], what: str) -> list[bytes]:
    """Frames written one after another (`b"".join(map(compress, parts))`), one part per name, decompressed."""
    out = []
    rest = data
    for name in names:
        z = zstandard.ZstdDecompressor().decompressobj() if rest.startswith(ZSTD_MAGIC) else zlib.decompressobj()
        try:
            out.append(z.decompress(rest))
        except (zstandard.ZstdError, zlib.error) as e:
            raise ValueError(f"the {what}'s {name} does not decompress: {e}") from e
        if not z.eof:
            raise ValueError(f"the {what} is cut short in its {name}")
        rest = z.unused_data
    return out
