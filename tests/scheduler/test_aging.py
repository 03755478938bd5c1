"""Aging and starvation: a waiting job moves up with its wait; a gang is not starved by a stream of small jobs."""

from __future__ import annotations

from scheduler import PendingJob, Resources, SharePolicy, WorkerSnapshot
from scheduler.placement import SchedulingPolicy
from scheduler.sharing import FairQueue
from scheduler.types import Band
from tests.scheduler.sim import Sim

HOST = Resources(1000, 1 << 30, 0, 0)


def fleet() -> list[WorkerSnapshot]:
    """One 4-host slice and nothing else: small jobs and the gang compete for the same hosts."""
    return [WorkerSnapshot(f"w{i}", HOST, {"tpu-name": "s", "tpu-worker-id": i}, HOST) for i in range(4)]


def stream(policy: SchedulingPolicy, horizon: float) -> Sim:
    """A 4-host gang submitted after a stream of 1-host jobs (60 s each, one new every 15 s) took the slice."""
    sim = Sim(fleet(), policy)
    small = 0

    def more(s: Sim) -> None:
        nonlocal small
        if s.now % 15 == 0:
            s.submit(PendingJob(f"small-{small}", (0,), HOST, user="bo"), 60.0)
            small += 1

    for _ in range(6):
        sim.step(5.0, more)
    sim.submit(PendingJob("gang", (0, 1, 2, 3), HOST, group_by="tpu-name", user="ana"), 60.0)
    while sim.now < horizon and "gang" not in sim.started:
        sim.step(5.0, more)
    return sim


def test_a_gang_starved_by_small_jobs_starts_once_its_hosts_are_held_back() -> None:
    """Past starvation_after the slice is held for the gang: it starts within the threshold plus one small job."""
    sim = stream(SchedulingPolicy(starvation_seconds=300.0), horizon=3600.0)
    assert "gang" in sim.started
    waited = sim.started["gang"] - sim.submitted["gang"]
    assert 300.0 <= waited <= 300.0 + 60.0 + 10.0


def test_without_holding_back_the_gang_waits_for_ever() -> None:
    """The same stream with no starvation threshold: backfill keeps the slice busy and the gang never starts."""
    sim = stream(SchedulingPolicy(starvation_seconds=float("inf")), horizon=3600.0)
    assert "gang" not in sim.started


def test_a_job_moves_up_with_its_wait_within_bounds() -> None:
    """A heavy user's job that waited 2 h goes before a user with 3x less use; at 4x more use the cap holds it."""
    old = PendingJob("heavy/old", (0,), HOST, band=Band.BATCH, user="heavy", waited_seconds=7200.0)
    new = PendingJob("light/new", (0,), HOST, band=Band.BATCH, user="light", waited_seconds=0.0)
    bands = {old.job_id: Band.BATCH, new.job_id: Band.BATCH}
    order = [j.job_id for j in FairQueue([new, old], bands, {"heavy": 3.0, "light": 1.0}, SharePolicy())]
    assert ["heavy/old", "light/new"] == order  # 3 x 1/4 < 1
    order = [j.job_id for j in FairQueue([new, old], bands, {"heavy": 20.0, "light": 1.0}, SharePolicy())]
    assert ["light/new", "heavy/old"] == order  # 20 x 1/4 > 1
    capped = PendingJob("heavy/old", (0,), HOST, band=Band.BATCH, user="heavy", waited_seconds=10 * 3600.0)
    order = [j.job_id for j in FairQueue([new, capped], bands, {"heavy": 20.0, "light": 1.0}, SharePolicy())]
    assert ["light/new", "heavy/old"] == order  # at most 1/16: 20/16 > 1, however long it waited
