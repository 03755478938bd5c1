"""The project's own chaos test: a mixed load under a seeded schedule of faults, on a supervised local cluster.

`benchmarks.chaos` does the work (and `python -m benchmarks chaos` runs it at 240 jobs); here it runs at a
size that fits the suite: 60 jobs, 6 faults (controller and dev-server SIGKILLs, agent SIGKILLs, agent
SIGSTOPs past the heartbeat timeout).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos import Fault, run_chaos
from tests.support import short_dead_controller_waits

SEED = 26


def test_a_mixed_load_survives_a_seeded_schedule_of_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing lost, nothing run twice at once, gangs whole, no agent died that no fault touched, every
    component back within 30 s, every scheduler, job and autoscaler run replays, no process left after
    `iris cluster down`.

    Temporal gives up on a SIGKILLed controller after seconds, as in the other fault tests (each controller kill
    cost ~10 s of the sticky timeout's wait, which checks nothing; `python -m benchmarks chaos` keeps the defaults)."""
    dynamic_config = short_dead_controller_waits(monkeypatch)
    report = run_chaos(tmp_path / "home", jobs=60, faults=6, seed=SEED, cpu_workers=3, dynamic_config=dynamic_config)
    print("\n" + report.figures())
    assert [] == report.problems
    assert {Fault.CONTROLLER_KILL, Fault.AGENT_KILL, Fault.AGENT_STOP, Fault.SERVER_KILL} == {
        r.fault for r in report.faults
    }
    assert 60 == sum(report.states.values())
    assert report.replayed > 60  # every job's runs and the scheduler's (a failure is one of the problems)
    assert [] == report.leftover_processes
