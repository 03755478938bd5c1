"""The teams bench times the pass under the collector the controller's pass process really runs with."""

from __future__ import annotations

import pytest

from iris.controller.gc_tuning import THRESHOLDS
from scheduler.bench import teams


def test_the_bench_uses_the_controllers_collector_thresholds() -> None:
    """The bench repeats the controller's thresholds (the scheduler imports nothing outside itself): a change
    to one without the other would time a collector nobody runs."""
    assert THRESHOLDS == teams.CONTROLLER_GC


def test_the_bench_prints_both_collectors_and_their_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    """A small input: both collectors' figures and a ratio for each, same plans either way."""
    assert 0 == teams.main(["--workers", "200", "--tasks", "2000", "--users", "20", "--teams", "4", "--repeats", "1"])
    out = capsys.readouterr().out
    assert 2 == out.count("   ratio   : ")
    assert "thresholds (50000, 20, 100)" in out
