"""Sharing a fleet in one pass: bands, credits-driven demotion, fair share between users, backfill."""

from __future__ import annotations

import pytest
from sched_helpers import gang, job, placed, running, tpu_slice, worker

from scheduler import (
    Band,
    DecayedUsage,
    Resources,
    ShareSnapshot,
    UserAccount,
    find_assignments,
    parse_band,
)

NOW = 100_000.0
RICH = 1000.0


def share(**options: object) -> ShareSnapshot:
    """A share snapshot at NOW where unknown users have plenty of credits."""
    return ShareSnapshot(now=NOW, default_credits=RICH, **options)  # type: ignore[arg-type]


def test_bands_go_in_order_production_interactive_batch() -> None:
    """With room for one task, production wins over an earlier interactive and an earlier batch job."""
    jobs = [job("b", band=Band.BATCH), job("i"), job("p", band=Band.PRODUCTION)]
    result = find_assignments([worker("w", cpu=1)], jobs, share=share())
    assert ["p"] == [a.job_id for a in result.assignments]


def test_bands_order_the_queue_without_a_share_snapshot_too() -> None:
    """A pass without sharing still puts higher bands first (FIFO inside a band)."""
    jobs = [job("b", band=Band.BATCH), job("i1"), job("i2")]
    result = find_assignments([worker("w", cpu=2)], jobs)
    assert ["i1", "i2"] == [a.job_id for a in result.assignments]


def test_the_default_band_is_interactive() -> None:
    """A job that names no band is interactive and is reported so."""
    result = find_assignments([worker("w", cpu=0)], [job("j")], share=share())
    assert Band.INTERACTIVE == job("j").band == result.effective_bands["j"]


def test_parse_band_normalizes_and_names_the_field() -> None:
    """Band names are case-insensitive; an unknown one is a ValueError naming the field and the choices."""
    assert Band.BATCH == parse_band(" Batch ")
    with pytest.raises(ValueError, match=r"priority must be one of production, interactive, batch, got 'urgent'"):
        parse_band("urgent")
    with pytest.raises(ValueError, match="priority"):
        parse_band(3)


def test_a_user_without_credits_is_scheduled_as_batch() -> None:
    """ana has 0 credits: her earlier interactive job waits behind bob's, and her reason says why."""
    users = {"ana": UserAccount("ana", 0.0)}
    jobs = [job("ana/a", user="ana"), job("bob/b", user="bob")]
    result = find_assignments([worker("w", cpu=1)], jobs, share=share(users=users))
    assert ["bob/b"] == [a.job_id for a in result.assignments]
    assert {"ana/a": Band.BATCH, "bob/b": Band.INTERACTIVE} == dict(result.effective_bands)
    assert result.pending_reasons["ana/a"].startswith(
        "scheduled as batch: ana has no credits left (interactive needs credits); 0/1 workers"
    )


def test_a_negative_balance_demotes_too_and_batch_stays_batch() -> None:
    """Any balance <= 0 demotes; a batch job is batch whatever the balance."""
    users = {"ana": UserAccount("ana", -3.5), "bob": UserAccount("bob", 5.0)}
    jobs = [job("a", user="ana", band=Band.PRODUCTION), job("b", user="bob", band=Band.BATCH)]
    result = find_assignments([worker("w", cpu=2)], jobs, share=share(users=users))
    assert {"a": Band.BATCH, "b": Band.BATCH} == dict(result.effective_bands)


def test_production_without_credits_runs_as_batch_rather_than_waiting() -> None:
    """A production job of a user with no credits still runs on idle capacity, as batch."""
    users = {"ana": UserAccount("ana", 0.0)}
    result = find_assignments([worker("w")], [job("p", user="ana", band=Band.PRODUCTION)], share=share(users=users))
    assert {0: "w"} == placed(result, "p")
    assert Band.BATCH == result.effective_bands["p"]


def test_fair_share_interleaves_users_inside_a_band() -> None:
    """ana's three earlier jobs do not all go before bob's one: after her first, bob (least share) goes."""
    jobs = [job("ana/1", user="ana"), job("ana/2", user="ana"), job("ana/3", user="ana"), job("bob/1", user="bob")]
    result = find_assignments([worker("w", cpu=2)], jobs, share=share())
    assert ["ana/1", "bob/1"] == [a.job_id for a in result.assignments]


def test_the_user_with_less_recent_usage_goes_first() -> None:
    """bob used 40 credits an hour ago, ana 100 credits a day ago (half-life 6 h): ana's usage is less now."""
    users = {
        "ana": UserAccount("ana", RICH, usage=DecayedUsage(100.0, NOW - 24 * 3600)),
        "bob": UserAccount("bob", RICH, usage=DecayedUsage(40.0, NOW - 3600)),
    }
    jobs = [job("bob/1", user="bob"), job("ana/1", user="ana")]
    result = find_assignments([worker("w", cpu=1)], jobs, share=share(users=users))
    assert ["ana/1"] == [a.job_id for a in result.assignments]


def test_running_work_counts_in_fair_share_before_it_is_charged() -> None:
    """ana runs ten tasks that nobody has charged yet; bob's later job still goes before hers."""
    busy = [worker(f"b{i}") for i in range(10)]
    sweep = running("ana/sweep", busy, band="interactive", request=Resources(8000, 1 << 30), coscheduled=False)
    jobs = [job("ana/2", user="ana"), job("bob/1", user="bob")]
    result = find_assignments([worker("w", cpu=1)], jobs, share=share(running=[sweep]))
    assert ["bob/1"] == [a.job_id for a in result.assignments]
    assert () == result.evictions


def test_fifo_breaks_ties_between_users_with_equal_share() -> None:
    """Two users with no usage: the earlier submission goes first."""
    jobs = [job("bob/1", user="bob"), job("ana/1", user="ana")]
    result = find_assignments([worker("w", cpu=1)], jobs, share=share())
    assert ["bob/1"] == [a.job_id for a in result.assignments]


def test_backfill_is_kept_with_sharing() -> None:
    """A gang that fits nowhere is skipped; a later small job of the same band starts."""
    workers = [*tpu_slice("s0", 2), worker("cpu0")]
    jobs = [gang("big", 4, user="ana"), job("small", user="ana")]
    result = find_assignments(workers, jobs, share=share())
    assert {0: "cpu0"} == placed(result, "small")
    assert "no tpu-name group has 4 matching workers" in result.pending_reasons["big"]
