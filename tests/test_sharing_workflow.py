"""The scheduler workflow's sharing part, without Temporal: snapshots, evictions as holds, charging, publishing."""

from __future__ import annotations

import pytest

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import find_assignments_activity, share_from_pb
from iris.client.views.user_balances import users_from_memo
from iris.config.cluster_file import parse_config
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.sharing_state import (
    USERS_MEMO,
    Books,
    Hold,
    SharingSettings,
    release_charge,
    take_evictions,
    users_memo,
)
from workflows.scheduler.snapshot_cache import encode_snapshot
from workflows.states import TaskState
from workflows.tasks.task_lifecycle import TaskEffect, TaskEvent, transition

NOW = 1_000_000.0


def _gang_state(victim_band: str = "batch", preemptor_band: str = "interactive") -> SchedulerState:
    """Four 1-core hosts of slice s, all taken by ana's gang; bob's gang of four waits for the slice."""
    state = SchedulerState()
    for i in range(4):
        state.workers[f"s-{i}"] = WorkerEntry(f"s-{i}", "x", 1000, 1 << 30, 0, 0, {"tpu-name": "s", "tpu-worker-id": i})
        state.placements[f"sweep/task-{i}"] = Placement("sweep", i, 0, f"s-{i}", 1000, 1 << 20, 0, 0, user="ana",
                                                        band=victim_band, gang=True, placed_at=NOW - 60)  # fmt: skip
    spec = SchedulingSpec(1000, 1 << 20, group_by="tpu-name", band=preemptor_band, user="bob")
    state.pending["urgent"] = PendingEntry("urgent", spec, dict.fromkeys(range(4), 0), NOW - 1)
    return state


def _pass(state: SchedulerState) -> pb.SchedulingPlan:
    return pb.SchedulingPlan.FromString(compressed.decompress(find_assignments_activity(encode_snapshot(state, NOW))))


def test_a_higher_band_gang_evicts_the_whole_lower_gang_and_waits_for_it() -> None:
    """The plan evicts all four tasks; the preemptor's assignments are held back, its workers kept for it."""
    state = _gang_state()
    plan = _pass(state)
    assert [("sweep", [0, 1, 2, 3], "batch", "urgent")] == [
        (e.job_id, sorted(e.task_indices), e.band, e.preemptor) for e in plan.evictions
    ]
    stops = take_evictions(state.books, state, plan, NOW)
    assert [(f"sweep/task-{i}", 0) for i in range(4)] == [(key, attempt) for key, attempt, _ in stops]
    assert [] == list(plan.assignments)  # nothing committed for the preemptor until its victims are gone
    assert {"urgent"} == state.books.waiting()
    assert {f"s-{i}" for i in range(4)} == state.books.held_workers()
    # While the victims stop, the next pass sees neither the held workers nor the preemptor: nothing more is evicted.
    again = _pass(state)
    assert ([], []) == (list(again.evictions), list(again.assignments))
    for i in range(4):
        del state.placements[f"sweep/task-{i}"]
        ready = state.books.released(f"sweep/task-{i}", 0)
        assert ready == (i == 3)
    placed = _pass(state)
    assert {f"s-{i}" for i in range(4)} == {a.worker_id for a in placed.assignments if a.job_id == "urgent"}


@pytest.mark.parametrize(("victim", "preemptor"), [("interactive", "interactive"), ("production", "production"),
                                                   ("batch", "batch")])  # fmt: skip
def test_no_eviction_without_a_strictly_higher_band(victim: str, preemptor: str) -> None:
    """Same band never evicts; production is never a victim."""
    plan = _pass(_gang_state(victim, preemptor))
    assert ([], []) == (list(plan.evictions), list(plan.assignments))


def test_a_user_without_credits_is_scheduled_as_batch_and_evicts_nothing() -> None:
    """bob's balance is spent: his interactive gang is demoted to batch, cannot evict, and the plan says so."""
    state = _gang_state()
    state.books.set_credits("bob", 0)
    plan = _pass(state)
    assert [] == list(plan.evictions)
    assert {"urgent": "batch"} == dict(plan.effective_bands)
    assert plan.pending_reasons["urgent"].startswith("scheduled as batch: bob has no credits left")


def test_evicting_and_unschedulable_placements_are_not_candidates_again() -> None:
    """A victim already told to stop, or on a cordoned worker, is left out of the snapshot's running work."""
    state = _gang_state()
    state.books.holds["other"] = Hold(["s-9"], {"sweep/task-0": 0}, NOW)
    state.workers["s-1"].cordoned = True
    share = share_from_pb(pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(state, NOW))))
    assert share is not None
    running = [sorted((t.task_index, t.worker_id) for t in job.tasks) for job in share.running]
    assert [[(2, "s-2"), (3, "s-3")]] == running


def test_a_release_is_charged_for_the_time_its_process_ran_once() -> None:
    """The agent's measured run time is charged, else placement to release; the same attempt twice is charged once."""
    books = Books(SharingSettings(cpu_core_hour=3600.0, default_credits=100.0))
    placement = Placement("j", 0, 0, "w", 2000, 0, 0, 0, user="ana", band="interactive", gang=False, placed_at=NOW)
    books.charge([release_charge(placement, NOW + 30, ran_seconds=10.0)])
    assert 20.0 == pytest.approx(books.accounts.account("ana").used)  # 2 cores x 10 s at 1 credit a core-second
    assert 80.0 == pytest.approx(books.accounts.account("ana").balance)
    other = Placement("j", 1, 0, "w", 1000, 0, 0, 0, user="ana", band="interactive", gang=False, placed_at=NOW)
    books.charge([release_charge(other, NOW + 5), release_charge(other, NOW + 5)])  # twice in one batch
    assert 25.0 == pytest.approx(books.accounts.account("ana").used)
    assert {} == dict(books.accounts.ledger.charged)  # the ledger stays empty between releases


def test_books_survive_continue_as_new() -> None:
    """Accounts, settings and holds come back from the packed state."""
    state = _gang_state()
    state.books.configure(SharingSettings(default_credits=5.0, preemption_grace_seconds=2.0))
    state.books.set_credits("ana", 7.5)
    state.books.holds["urgent"] = Hold(["s-0"], {"sweep/task-0": 0}, NOW)
    assert state == unpack(pack(state))


def test_the_published_user_table_reads_back_as_user_status() -> None:
    """Users with accounts, running tasks or pending jobs, by name; an unknown user shows the default balance."""
    books = Books(SharingSettings(default_credits=50.0))
    books.set_credits("cy", 3.0)
    rows = users_memo(books, {"ana": 4, "": 1}, {"bob": 2})
    assert ["ana", "bob", "cy"] == [row[0] for row in rows]
    users = users_from_memo({USERS_MEMO: rows})
    assert (50.0, 4, 0) == (users[0].credits, users[0].running_tasks, users[0].pending_jobs)
    assert (3.0, 0.0) == (users[2].credits, users[2].used)


def test_an_evicted_attempt_counts_a_preemption_not_a_failure() -> None:
    """Evicted while assigned or running: the place is released and the preemption budget is spent."""
    for state in (TaskState.ASSIGNED, TaskState.RUNNING):
        step = transition(state, TaskEvent.EVICTED)
        assert TaskState.WORKER_FAILED == step.next
        assert (TaskEffect.RELEASE, TaskEffect.COUNT_PREEMPTION) == step.effects


def test_the_sharing_config_block_is_validated() -> None:
    """Durations and rates are read; an unknown key or a negative rate is one line naming the field."""
    config = parse_config({"sharing": {"preemption_grace": "5s", "half_life": "2h", "default_credits": 9}}, "f")
    assert (5.0, 2.0, 9.0) == (config.sharing.preemption_grace_seconds, config.sharing.half_life_hours,
                               config.sharing.default_credits)  # fmt: skip
    with pytest.raises(ValueError, match=r"^f: sharing\.grace: unknown key"):
        parse_config({"sharing": {"grace": 1}}, "f")
    with pytest.raises(ValueError, match=r"^f: sharing\.rates\.gpu_hour: "):
        parse_config({"sharing": {"rates": {"gpu_hour": -1}}}, "f")
    with pytest.raises(ValueError, match=r"^f: sharing\.half_life: must be > 0"):
        parse_config({"sharing": {"half_life": 0}}, "f")


def test_a_gang_that_a_new_slice_can_serve_waits_for_it_instead_of_evicting() -> None:
    """With room for another 4-host slice in a scale group, the preemptor waits for the autoscaler."""
    state = _gang_state()
    state.books.headroom = [["tpu", 1, 4, [1000, 1 << 30, 0, 0], {}]]
    plan = _pass(state)
    assert [] == list(plan.evictions)
    assert "waiting for a new tpu slice from the autoscaler (nothing evicted)" in plan.pending_reasons["urgent"]
    assert state.books == unpack(pack(state)).books
    state.books.headroom = [["tpu", 0, 4, [1000, 1 << 30, 0, 0], {}]]  # the group is at max_slices
    assert 1 == len(_pass(state).evictions)
