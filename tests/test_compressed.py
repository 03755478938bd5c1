"""The one compression of the scheduler's payloads: zstd written, zstd and an earlier build's zlib read."""

from __future__ import annotations

import zlib

import pytest

from activities.proto import compressed

DATA = b"worker-row " * 5_000


def test_a_payload_round_trips_and_says_its_size() -> None:
    packed = compressed.compress(DATA)
    assert len(packed) < len(DATA) // 10
    assert DATA == compressed.decompress(packed)
    assert len(DATA) == compressed.content_size(packed)  # from the frame's header, nothing decompressed


def test_zlib_an_earlier_build_wrote_still_reads() -> None:
    old = zlib.compress(DATA, 1)
    assert DATA == compressed.decompress(old)
    assert len(old) == compressed.content_size(old)  # zlib does not say: its own size


def test_frames_one_after_another_split_by_name_and_a_cut_one_is_named() -> None:
    parts = [b"head", DATA, b""]
    joined = b"".join(map(compressed.compress, parts))
    assert parts == compressed.split(joined, ["header", "body", "tail"], "carry")
    mixed = compressed.compress(b"head") + zlib.compress(DATA)
    assert [b"head", DATA] == compressed.split(mixed, ["header", "body"], "carry")
    with pytest.raises(ValueError, match="the carry is cut short in its body"):
        compressed.split(joined[:-20], ["header", "body", "tail"], "carry")


def test_what_is_neither_is_refused_naming_what_it_was() -> None:
    with pytest.raises(ValueError, match="the scheduling plan does not decompress"):
        compressed.decompress(b"not a frame", "scheduling plan")
    with pytest.raises(ValueError, match="the scheduling plan does not decompress"):
        compressed.decompress(compressed.compress(DATA)[:-8] + b"garbage!", "scheduling plan")
