"""The teams bench times the pass under the collector the controller's pass process really runs with."""

from __future__ import annotations

import pytest

from benchmarks.scheduler_bench import teams


def test_the_bench_prints_both_collectors_and_their_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    """A small input: both collectors' figures and a ratio for each, same plans either way."""
    assert 0 == teams.main(["--workers", "200", "--tasks", "2000", "--users", "20", "--teams", "4", "--repeats", "1"])
    out = capsys.readouterr().out
    assert 2 == out.count("   ratio   : ")
    assert 2 == out.count("x cpu, median of 1 pairs;")
    assert "thresholds (50000, 20, 100)" in out


def test_pairs_cancel_a_change_of_the_machines_speed() -> None:
    """The ratio is each pair's, then their median: the machine's speed changing between pairs (2x slower for
    two of them) and one pair disturbed in its middle move it not at all, where the ratio of the bests (2.4x)
    or of the medians (1.5x) pairs moments that did not run side by side."""
    from benchmarks.scheduler_bench import pair_order, paired_ratio

    base, other = [0.5, 2.0, 2.0, 1.0, 1.0], [1.5, 2.4, 2.4, 1.2, 1.2]  # 1.2x in every pair but the first
    assert 1.2 == pytest.approx(paired_ratio(base, other))
    assert [pair_order(r) for r in range(3)] == [(False, True), (True, False), (False, True)]
