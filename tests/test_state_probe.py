"""`python -m benchmarks state-probe` on a tiny state: both forms are measured and the messages carry it all."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from benchmarks.snapshot import build_state
from benchmarks.state_probe import main, probe_schema, to_messages


def test_the_probe_prints_both_forms_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    assert 0 == main(["--workers", "20", "--placed", "200", "--pending", "100", "--tasks-per-job", "10"])
    out = capsys.readouterr().out
    assert "20 workers, 200 placed, 100 queued (10 jobs)" in out
    for row in ("hand over (pack)", "take over (load)", "carried bytes (compressed)", "objects the collector tracks"):
        assert row in out, out


def test_the_messages_hold_every_worker_queued_task_placement_and_total() -> None:
    """What the probe times must be the whole state, or its figures flatter the messages."""
    pb = probe_schema()
    state = build_state(20, 200, 95, 10)
    parsed = pb.State.FromString(to_messages(pb, state).SerializeToString())
    assert list(state.workers) == list(parsed.names) and set(state.workers) == set(parsed.workers)
    assert list(state.pending) == [q.job_id for q in parsed.queue]  # the FIFO order survives
    assert 95 == sum(len(q.attempts) for q in parsed.queue)
    placed = {(job_id, index): (parsed.names[t.worker], t.attempt)
              for job_id, job in parsed.placed.items() for index, t in job.tasks.items()}  # fmt: skip
    assert {(p.job_id, p.task_index): (p.worker_id, p.attempt) for p in state.placements.values()} == placed
    assert {w: u[0] for w, u in state.placements.used.items()} == {w: u.cpu_millis for w, u in parsed.used.items()}


def test_the_probe_leaves_no_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert probe_schema().State is not None
    assert [] == list(tmp_path.iterdir())


def test_bad_sizes_are_refused_naming_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--workers", "0"])
    assert "--workers and --tasks-per-job must be >= 1" in capsys.readouterr().err
