"""The autoscaler's demand function: which groups grow, which idle slices go, and why not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler import Constraint, Op, PendingJob, Resources, WorkerSnapshot
from scheduler.autoscale import GroupShape, SliceView, plan_scaling, slice_hosts
from tests.scheduler.sched_helpers import GIB, gang, job, worker

TPU = GroupShape(
    name="tpu-v5e-16",
    hosts_per_slice=4,
    host_capacity=Resources(16000, 64 * GIB, 0, 4),
    attributes={"tpu-topology": "v5e-16"},
    max_slices=2,
    scale_down_delay=30,
)
CPU = GroupShape(name="cpu", hosts_per_slice=2, host_capacity=Resources(2000, 8 * GIB), max_slices=5)


def busy(hosts: list[WorkerSnapshot]) -> list[WorkerSnapshot]:
    """The same hosts with one core in use."""
    return [
        WorkerSnapshot(h.worker_id, Resources(h.free.cpu_millis - 1000, h.free.memory_bytes), h.attributes, h.capacity)
        for h in hosts
    ]


def test_a_gang_on_an_empty_group_asks_for_one_slice() -> None:
    """A coscheduled 4-host job with nothing to run on creates exactly one slice of the matching group."""
    plan = plan_scaling([CPU, TPU], [], [gang("train", 4, "v5e-16")], [], now=100.0)
    assert {"tpu-v5e-16": 1} == dict(plan.create)
    assert {} == dict(plan.unmet)


def test_two_gangs_with_room_for_one_slice_leave_the_second_waiting_with_a_reason() -> None:
    """max_slices caps the group; the job that does not get a slice is told why."""
    one = GroupShape(**{**TPU.__dict__, "max_slices": 1})
    plan = plan_scaling([one], [], [gang("a", 4, "v5e-16"), gang("b", 4, "v5e-16")], [], now=0.0)
    assert {"tpu-v5e-16": 1} == dict(plan.create)
    assert "at max_slices (1)" in plan.unmet["b"]
    assert "at max_slices (1)" == plan.group_reasons["tpu-v5e-16"]


def test_plain_tasks_pack_into_as_few_slices_as_fit() -> None:
    """Ten one-core tasks on 2-host, 2-core slices need three slices (four tasks per slice)."""
    plan = plan_scaling([CPU], [], [job("many", tasks=10, cpu=1)], [], now=0.0)
    assert {"cpu": 3} == dict(plan.create)


def test_work_that_fits_on_free_workers_creates_nothing() -> None:
    """Pending tasks that existing workers can take (the scheduler just has not run yet) are no demand."""
    plan = plan_scaling([CPU], [], [job("small", tasks=2)], [worker("w0", cpu=4)], now=0.0)
    assert {} == dict(plan.create)


def test_a_slice_still_booting_absorbs_the_demand_it_was_made_for() -> None:
    """While a slice is CREATING, the gang it was created for does not create a second one."""
    booting = SliceView("tpu-v5e-16-a", "tpu-v5e-16", "CREATING", tuple(f"tpu-v5e-16-a-{i}" for i in range(4)))
    plan = plan_scaling([TPU], [booting], [gang("train", 4, "v5e-16")], [], now=5.0)
    assert {} == dict(plan.create)


def test_a_job_no_group_can_host_says_what_each_group_lacks() -> None:
    """The reason names every group and what it lacks, so `pending_reason` can explain the wait."""
    plan = plan_scaling([CPU, TPU], [], [gang("big", 4, "v4-32")], [], now=0.0)
    assert {} == dict(plan.create)
    reason = plan.unmet["big"]
    assert "cpu:" in reason and "tpu-v5e-16:" in reason
    assert "tpu-topology" in reason


def test_a_gang_grouped_by_an_attribute_slices_lack_is_unmet() -> None:
    """Coscheduling on an attribute the group's hosts do not have can never be satisfied by scaling."""
    pending = job("odd", tasks=2, constraints=(), group_by="rack")
    plan = plan_scaling([CPU], [], [pending], [], now=0.0)
    assert {} == dict(plan.create)
    assert "odd" in plan.unmet


def test_min_slices_are_created_and_a_gang_claims_one_instead_of_adding_another() -> None:
    """min_slices is owed with an empty queue, and pending work uses those slices first."""
    kept = GroupShape(**{**TPU.__dict__, "min_slices": 1})
    assert {"tpu-v5e-16": 1} == dict(plan_scaling([kept], [], [], [], now=0.0).create)
    assert {"tpu-v5e-16": 1} == dict(plan_scaling([kept], [], [gang("g", 4, "v5e-16")], [], now=0.0).create)


def test_backoff_and_scale_up_delay_block_with_a_reason() -> None:
    """A backing-off group and one inside its scale_up_delay create nothing and say why."""
    backing = GroupShape(**{**TPU.__dict__, "backoff_until": 160.0, "backoff_reason": "QuotaExhausted: no v5e"})
    plan = plan_scaling([backing], [], [gang("g", 4, "v5e-16")], [], now=100.0)
    assert {} == dict(plan.create)
    assert "backing off for 60s: QuotaExhausted: no v5e" == plan.group_reasons["tpu-v5e-16"]
    assert "backing off" in plan.unmet["g"]

    delayed = GroupShape(**{**TPU.__dict__, "scale_up_delay": 30.0, "last_scale_up": 90.0})
    plan = plan_scaling([delayed], [], [gang("g", 4, "v5e-16")], [], now=100.0)
    assert "scale_up_delay 30s: next scale-up in 20s" == plan.group_reasons["tpu-v5e-16"]
    later = plan_scaling([delayed], [], [gang("g", 4, "v5e-16")], [], now=121.0)
    assert {"tpu-v5e-16": 1} == dict(later.create)


def test_timed_out_jobs_are_no_demand() -> None:
    """A job whose scheduling timeout passed is about to be UNSCHEDULABLE, not a reason to grow."""
    late = gang("late", 4, "v5e-16", waited_seconds=10.0, scheduling_timeout_seconds=5.0)
    assert {} == dict(plan_scaling([TPU], [], [late], [], now=0.0).create)


def ready(slice_id: str, group: GroupShape = TPU, idle_since: float | None = None) -> SliceView:
    hosts = slice_hosts(group, slice_id)
    return SliceView(slice_id, group.name, "READY", tuple(h.worker_id for h in hosts), idle_since)


def test_an_idle_slice_is_removed_after_its_delay_and_not_before() -> None:
    """idle_since starts when every host is empty; the slice goes once scale_down_delay has passed."""
    s = ready("s1")
    hosts = slice_hosts(TPU, "s1")
    first = plan_scaling([TPU], [s], [], hosts, now=100.0)
    assert 100.0 == first.idle_since["s1"]
    assert () == first.remove
    s = ready("s1", idle_since=first.idle_since["s1"])
    assert () == plan_scaling([TPU], [s], [], hosts, now=129.0).remove
    assert ("s1",) == plan_scaling([TPU], [s], [], hosts, now=130.0).remove


def test_the_plan_says_when_an_idle_slice_reaches_its_delay() -> None:
    """The workflow looks again exactly when the idle slice may go, not at its next regular tick."""
    hosts = slice_hosts(TPU, "s1")
    assert 30.0 == plan_scaling([TPU], [ready("s1")], [], hosts, now=100.0).recheck_after
    assert 1.5 == plan_scaling([TPU], [ready("s1", idle_since=100.0)], [], hosts, now=128.5).recheck_after
    gone = plan_scaling([TPU], [ready("s1", idle_since=100.0)], [], hosts, now=130.0)
    assert ("s1",) == gone.remove
    assert gone.recheck_after is None  # removed: nothing left to wait for
    assert plan_scaling([TPU], [ready("s1", idle_since=0.0)], [], busy(hosts), now=100.0).recheck_after is None


def test_the_plan_says_when_a_group_that_work_waits_for_may_grow_again() -> None:
    """A backoff or scale_up_delay ending while a job waits is a deadline; with no job waiting it is none."""
    backing = GroupShape(**{**TPU.__dict__, "backoff_until": 160.0})
    assert 60.0 == plan_scaling([backing], [], [gang("g", 4, "v5e-16")], [], now=100.0).recheck_after
    assert plan_scaling([backing], [], [], [], now=100.0).recheck_after is None
    delayed = GroupShape(**{**TPU.__dict__, "scale_up_delay": 30.0, "last_scale_up": 90.0})
    assert 20.0 == plan_scaling([delayed], [], [gang("g", 4, "v5e-16")], [], now=100.0).recheck_after
    kept = GroupShape(**{**TPU.__dict__, "min_slices": 1})  # idle past its delay but kept: no deadline left
    assert plan_scaling([kept], [ready("s1", kept, 0.0)], [], slice_hosts(kept, "s1"), now=100.0).recheck_after is None


def test_a_busy_slice_is_not_idle() -> None:
    """One host with a task running keeps the slice, and resets its idle clock."""
    s = ready("s1", idle_since=0.0)
    plan = plan_scaling([TPU], [s], [], busy(slice_hosts(TPU, "s1")), now=1000.0)
    assert plan.idle_since["s1"] is None
    assert () == plan.remove


def test_a_slice_about_to_get_pending_work_is_not_removed() -> None:
    """An idle slice that the queue's next job fits on stays."""
    s = ready("s1", idle_since=0.0)
    plan = plan_scaling([TPU], [s], [gang("g", 4, "v5e-16")], slice_hosts(TPU, "s1"), now=1000.0)
    assert () == plan.remove
    assert {} == dict(plan.create)


@pytest.mark.parametrize("min_slices", [0, 1, 2])
def test_scale_down_keeps_min_slices_and_removes_the_longest_idle_first(min_slices: int) -> None:
    """Idle slices go oldest-idle first, never below min_slices."""
    group = GroupShape(**{**TPU.__dict__, "min_slices": min_slices, "max_slices": 3})
    slices = [ready("a", group, 50.0), ready("b", group, 10.0)]
    hosts = slice_hosts(group, "a") + slice_hosts(group, "b")
    plan = plan_scaling([group], slices, [], hosts, now=1000.0)
    assert ("b", "a")[: max(0, 2 - min_slices)] == plan.remove


def test_unregistered_hosts_keep_a_ready_slice_from_counting_as_idle() -> None:
    """A READY slice whose workers are not (or no longer) registered is not scaled down as idle."""
    plan = plan_scaling([TPU], [ready("s1", idle_since=0.0)], [], [], now=1000.0)
    assert plan.idle_since["s1"] is None


def test_slices_of_unknown_groups_are_ignored_and_bad_shapes_are_refused() -> None:
    """A slice from a group no longer configured does not count; invalid values fail at construction."""
    stray = SliceView("x", "gone", "READY", ("x-0",))
    assert {"cpu": 1} == dict(plan_scaling([CPU], [stray], [job("j", tasks=1)], [], now=0.0).create)
    with pytest.raises(ValueError, match="min_slices"):
        GroupShape(name="g", hosts_per_slice=1, host_capacity=Resources(1000), min_slices=3, max_slices=2)
    with pytest.raises(ValueError, match="state"):
        SliceView("s", "g", "FAILED")


def test_constraints_see_the_group_and_slice_attributes() -> None:
    """Jobs may select a group by `iris-scale-group` like any worker attribute."""
    pinned = job("p", tasks=1, constraints=(Constraint("iris-scale-group", Op.EQ, "cpu"),))
    plan = plan_scaling([TPU, CPU], [], [pinned], [], now=0.0)
    assert {"cpu": 1} == dict(plan.create)


def test_a_higher_band_gets_the_last_slice_first() -> None:
    """With room for one slice, a later interactive gang gets it before an earlier batch gang."""
    from scheduler import Band

    one = GroupShape(**{**TPU.__dict__, "max_slices": 1})
    jobs = [gang("batch", 4, "v5e-16", band=Band.BATCH), gang("inter", 4, "v5e-16")]
    plan = plan_scaling([one], [], jobs, [], now=0.0)
    assert ["batch"] == list(plan.unmet)


def test_plain_jobs_of_one_class_share_the_slice_capacity_not_the_first_jobs_size() -> None:
    """A 1-task job then an 8-task job of the same request need 3 two-host slices (9 tasks, 4 per slice), not 9."""
    plan = plan_scaling([CPU], [], [job("a", 1), job("b", 8)], [], now=0.0)
    assert {"cpu": 3} == dict(plan.create)


def multi_gang(job_id: str, slices: int, **options: object) -> PendingJob:
    """A coscheduled v5e-16 job over `slices` slices (4 hosts each)."""
    return replace(gang(job_id, 4 * slices, "v5e-16", **options), num_groups=slices)


def test_a_multi_slice_gang_asks_for_k_slices_at_once() -> None:
    """A 2-slice v5e-16 job with nothing to run on creates two slices of the group."""
    wide = GroupShape(**{**TPU.__dict__, "max_slices": 4})
    plan = plan_scaling([wide], [], [multi_gang("train", 2)], [], now=0.0)
    assert {"tpu-v5e-16": 2} == dict(plan.create)
    assert {} == dict(plan.unmet)


def test_a_multi_slice_gang_counts_the_free_slice_it_can_already_use() -> None:
    """With one idle slice, a 3-slice job asks for two more, and the idle slice is kept for it."""
    wide = GroupShape(**{**TPU.__dict__, "max_slices": 4})
    plan = plan_scaling([wide], [ready("s1", wide, 0.0)], [multi_gang("train", 3)], slice_hosts(wide, "s1"), now=1e3)
    assert {"tpu-v5e-16": 2} == dict(plan.create)
    assert () == plan.remove
    assert plan.idle_since["s1"] is None


def test_a_multi_slice_gang_gets_all_its_slices_or_none() -> None:
    """With room for one slice of the two needed, nothing is created and the job is told why."""
    plan = plan_scaling([TPU], [ready("s1", TPU, 0.0)], [multi_gang("train", 3)], slice_hosts(TPU, "s1"), now=1e3)
    assert {} == dict(plan.create)
    assert "at max_slices (2): 2 new slices needed, room for 1" in plan.unmet["train"]


def test_booting_slices_absorb_a_multi_slice_gangs_demand() -> None:
    """While the two slices made for a 2-slice job boot, the job asks for nothing more."""
    wide = GroupShape(**{**TPU.__dict__, "max_slices": 4})
    booting = [
        SliceView(name, "tpu-v5e-16", "CREATING", tuple(f"{name}-{i}" for i in range(4))) for name in ("a", "b")
    ]
    plan = plan_scaling([wide], booting, [multi_gang("train", 2)], [], now=0.0)
    assert {} == dict(plan.create)


BUFFERED = GroupShape(**{**TPU.__dict__, "max_slices": 3, "buffer_slices": 1})


def test_buffer_slices_creates_a_spare_slice_beyond_demand() -> None:
    """An empty group with buffer_slices 1 creates one slice; with a gang waiting, the gang's plus one."""
    assert {"tpu-v5e-16": 1} == dict(plan_scaling([BUFFERED], [], [], [], now=0.0).create)
    plan = plan_scaling([BUFFERED], [], [gang("train", 4, "v5e-16")], [], now=0.0)
    assert {"tpu-v5e-16": 2} == dict(plan.create)


def test_a_booting_or_idle_spare_slice_is_the_buffer() -> None:
    """Nothing more is created while the spare slice boots, nor once it is READY and idle."""
    booting = SliceView("b1", TPU.name, "CREATING", ())
    assert {} == dict(plan_scaling([BUFFERED], [booting], [], [], now=0.0).create)
    hosts = slice_hosts(TPU, "s1")
    assert {} == dict(plan_scaling([BUFFERED], [ready("s1")], [], hosts, now=0.0).create)


def test_a_job_taking_the_buffer_slice_makes_a_new_one() -> None:
    """The gang that fits on the idle spare slice uses it; another spare is created beside it."""
    hosts = slice_hosts(TPU, "s1")
    plan = plan_scaling([BUFFERED], [ready("s1", idle_since=0.0)], [gang("train", 4, "v5e-16")], hosts, now=5.0)
    assert plan.idle_since["s1"] is None
    assert {"tpu-v5e-16": 1} == dict(plan.create)


def test_buffer_slices_stay_within_max_slices() -> None:
    """A group at max_slices with busy slices creates no spare."""
    slices = [ready(f"s{i}") for i in range(3)]
    hosts = [h for i in range(3) for h in busy(slice_hosts(TPU, f"s{i}"))]
    assert {} == dict(plan_scaling([BUFFERED], slices, [], hosts, now=0.0).create)


def test_the_idle_buffer_slice_is_not_scaled_down_but_extra_idle_ones_are() -> None:
    """Two slices idle past scale_down_delay with buffer_slices 1: the longest idle goes, one stays."""
    slices = [ready("s1", idle_since=0.0), ready("s2", idle_since=10.0)]
    hosts = slice_hosts(TPU, "s1") + slice_hosts(TPU, "s2")
    plan = plan_scaling([BUFFERED], slices, [], hosts, now=1000.0)
    assert ("s1",) == plan.remove
    assert {} == dict(plan.create)
    alone = plan_scaling([BUFFERED], [ready("s2", idle_since=10.0)], [], slice_hosts(TPU, "s2"), now=1000.0)
    assert () == alone.remove


def test_a_backing_off_group_makes_no_buffer() -> None:
    blocked = GroupShape(**{**BUFFERED.__dict__, "backoff_until": 100.0, "backoff_reason": "quota"})
    plan = plan_scaling([blocked], [], [], [], now=0.0)
    assert {} == dict(plan.create)
    assert "quota" in plan.group_reasons[TPU.name]


def test_buffer_slices_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="buffer_slices"):
        GroupShape(**{**TPU.__dict__, "buffer_slices": -1})
