"""The task, job, worker and scheduler-run tables: reachable states, ways out, and effects that never leak a place."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from workflows.fleet import autoscaler_pace as pace
from workflows.fleet import worker_lifecycle as worker
from workflows.fleet.autoscaler_pace import AutoscalerPace, PlanOutcome
from workflows.fleet.worker_lifecycle import WorkerEffect, WorkerEvent, WorkerState
from workflows.jobs import job_lifecycle as job
from workflows.jobs.job_lifecycle import JobEffect, JobEvent, JobPhase
from workflows.lifecycle import InvalidTransition, Step
from workflows.scheduler import scheduler_phase as phase
from workflows.scheduler.scheduler_phase import SchedulerEffect, SchedulerEvent, SchedulerPhase
from workflows.states import TERMINAL_TASK_STATES, TaskState
from workflows.tasks import task_lifecycle as task
from workflows.tasks.task_lifecycle import TaskEffect, TaskEvent

LIVE_TASK = [s for s in TaskState if s not in TERMINAL_TASK_STATES]
ATTEMPT = (TaskState.ASSIGNED, TaskState.RUNNING)
S = TypeVar("S")


def _reachable(table: Mapping[tuple[S, Any], Step[S, Any]], start: S) -> set[S]:
    """The states (or phases) `table` can reach from `start`, `start` included."""
    seen, frontier = {start}, [start]
    while frontier:
        current = frontier.pop()
        for (src, _), step in table.items():
            if src == current and step.next not in seen:
                seen.add(step.next)
                frontier.append(step.next)
    return seen


def test_every_task_state_is_reachable_from_pending() -> None:
    """No state in the enum is dead code: each is reached from PENDING."""
    assert set(TaskState) == _reachable(task.TRANSITIONS, TaskState.PENDING)


@pytest.mark.parametrize("state", LIVE_TASK)
def test_every_live_task_state_can_end(state: TaskState) -> None:
    """From every live state some events reach a final state (SUCCEEDED, KILLED, UNSCHEDULABLE)."""
    assert _reachable(task.TRANSITIONS, state) & (TERMINAL_TASK_STATES - {TaskState.FAILED, TaskState.WORKER_FAILED})


@pytest.mark.parametrize("state", [s for s in TaskState if s not in task.UNKILLABLE])
def test_a_task_can_be_killed_whenever_it_is_not_over(state: TaskState) -> None:
    """A job's kill reaches every task that is not over, and gives its place back."""
    step = task.transition(state, TaskEvent.KILLED)
    assert (TaskState.KILLED, (TaskEffect.RELEASE,)) == (step.next, step.effects)


@pytest.mark.parametrize("state", sorted(task.UNKILLABLE))
def test_a_task_that_is_over_takes_no_event(state: TaskState) -> None:
    """SUCCEEDED, KILLED and UNSCHEDULABLE are final: nothing leaves them, and trying fails loudly."""
    assert not [key for key in task.TRANSITIONS if key[0] == state]
    with pytest.raises(InvalidTransition, match=f"task in state {state} cannot take event killed"):
        task.transition(state, TaskEvent.KILLED)


@pytest.mark.parametrize(
    ("key", "step"), [(k, v) for k, v in task.TRANSITIONS.items() if k[0] in ATTEMPT and v.next not in ATTEMPT]
)
def test_an_attempt_that_ends_gives_its_place_back(key: tuple[TaskState, TaskEvent], step: task.Step) -> None:
    """However an attempt ends (success, failure, lost worker, dispatch failure, kill), its capacity is released."""
    assert TaskEffect.RELEASE in step.effects, key


@pytest.mark.parametrize(("key", "step"), list(task.TRANSITIONS.items()))
def test_budgets_are_charged_exactly_when_a_task_fails_or_loses_its_worker(
    key: tuple[TaskState, TaskEvent], step: task.Step
) -> None:
    """A failure spends the failure budget, a lost worker the preemption budget; nothing else spends either."""
    expected = {TaskState.FAILED: {TaskEffect.COUNT_FAILURE}, TaskState.WORKER_FAILED: {TaskEffect.COUNT_PREEMPTION}}
    charged = {e for e in step.effects if e in (TaskEffect.COUNT_FAILURE, TaskEffect.COUNT_PREEMPTION)}
    assert expected.get(step.next, set()) == charged, key


@pytest.mark.parametrize(("key", "step"), [(k, v) for k, v in task.TRANSITIONS.items() if v.next == TaskState.PENDING])
def test_a_task_back_in_the_queue_asks_for_a_place(key: tuple[TaskState, TaskEvent], step: task.Step) -> None:
    """A retry and a dispatch failure both enqueue the next attempt; a retry also tells the job."""
    assert TaskEffect.ENQUEUE in step.effects, key
    assert (TaskEffect.TELL_JOB in step.effects) == (key[1] == TaskEvent.RETRY), key


def test_an_illegal_task_move_names_state_and_event() -> None:
    """A move the table lacks is a bug in the workflow: it raises, naming both."""
    with pytest.raises(InvalidTransition, match="task in state PENDING cannot take event succeeded"):
        task.transition(TaskState.PENDING, TaskEvent.SUCCEEDED)


@pytest.mark.parametrize("phase", list(JobPhase))
def test_a_kill_wins_in_every_phase(phase: JobPhase) -> None:
    """Whatever the job is doing, a kill takes it to KILLING; a job not yet killed cancels its tasks on the way."""
    step = job.transition(phase, JobEvent.KILL)
    assert JobPhase.KILLING == step.next
    assert (JobEffect.CANCEL_RUNNING in step.effects) == (phase != JobPhase.KILLING)


@pytest.mark.parametrize("event", [e for e in JobEvent if e != JobEvent.GANG_RETRY])
def test_killing_absorbs_every_event(event: JobEvent) -> None:
    """A killed job ends KILLED: nothing that happens while its tasks stop changes that or does anything."""
    assert job.Step(JobPhase.KILLING) == job.transition(JobPhase.KILLING, event)


@pytest.mark.parametrize(("key", "step"), [(k, v) for k, v in job.TRANSITIONS.items() if k[0] == JobPhase.ACTIVE])
def test_leaving_active_cancels_the_running_tasks(key: tuple[JobPhase, JobEvent], step: job.Step) -> None:
    """A job that fails, breaks its gang or is killed cancels what still runs at once."""
    assert JobEffect.CANCEL_RUNNING in step.effects, key


@pytest.mark.parametrize("phase", [p for p in JobPhase if p != JobPhase.GANG_BROKEN])
def test_only_a_broken_gang_goes_again(phase: JobPhase) -> None:
    """Only a broken gang returns to ACTIVE (its rows reset); a failing or killed job never does."""
    assert not [k for k, v in job.TRANSITIONS.items() if k[0] == phase and v.next == JobPhase.ACTIVE]
    with pytest.raises(InvalidTransition, match=f"job in phase {phase} cannot take event gang_retry"):
        job.transition(phase, JobEvent.GANG_RETRY)
    assert (JobPhase.ACTIVE, (JobEffect.RESET_TASKS,)) == (
        job.transition(JobPhase.GANG_BROKEN, JobEvent.GANG_RETRY).next,
        job.transition(JobPhase.GANG_BROKEN, JobEvent.GANG_RETRY).effects,
    )


def test_the_first_break_of_a_gang_is_its_cause() -> None:
    """Only the break that leaves ACTIVE keeps its result as the cause; later ones while winding down do not."""
    keeping = [k for k, v in job.TRANSITIONS.items() if JobEffect.KEEP_CAUSE in v.effects]
    assert [(JobPhase.ACTIVE, JobEvent.GANG_BROKE)] == keeping


@pytest.mark.parametrize("state", list(WorkerState))
def test_a_registration_always_brings_a_worker_back_fresh(state: WorkerState) -> None:
    """A new agent session makes any worker READY with a fresh entry (its cordon kept by the workflow)."""
    assert worker.Step(WorkerState.READY, (WorkerEffect.RESET,)) == worker.transition(state, WorkerEvent.REGISTERED)


def test_every_worker_state_is_reachable_and_can_get_back_to_ready() -> None:
    """No dead state: each is reached from READY, and each leads back to READY."""
    assert set(WorkerState) == _reachable(worker.TRANSITIONS, WorkerState.READY)
    assert all(WorkerState.READY in _reachable(worker.TRANSITIONS, s) for s in WorkerState)


@pytest.mark.parametrize(("key", "step"), list(worker.TRANSITIONS.items()))
def test_a_quarantine_starts_only_when_a_ready_worker_fails_a_dispatch(
    key: tuple[WorkerState, WorkerEvent], step: worker.Step
) -> None:
    """Failures inside a quarantine are one incident: only READY -> QUARANTINED counts one and quarantines."""
    assert (WorkerEffect.QUARANTINE in step.effects) == (key == (WorkerState.READY, WorkerEvent.DISPATCH_FAILED))


@pytest.mark.parametrize(("key", "step"), list(worker.TRANSITIONS.items()))
def test_a_worker_is_stamped_lost_once(key: tuple[WorkerState, WorkerEvent], step: worker.Step) -> None:
    """Only the move into LOST stamps the time (its retention counts from the first report)."""
    assert (WorkerEffect.STAMP_LOST in step.effects) == (key[0] != WorkerState.LOST and step.next == WorkerState.LOST)


@pytest.mark.parametrize("state", [s for s in WorkerState if s != WorkerState.QUARANTINED])
def test_only_a_quarantine_can_end(state: WorkerState) -> None:
    """QUARANTINE_ENDED outside a quarantine is a bug: it fails loudly, naming state and event."""
    with pytest.raises(InvalidTransition, match=f"worker in state {state} cannot take event quarantine_ended"):
        worker.transition(state, WorkerEvent.QUARANTINE_ENDED)


# -- the scheduler's phases (workflows/scheduler/scheduler_phase.py) ---------------------------------------------------

_START = {SchedulerEvent.CARRIED, SchedulerEvent.EMPTY}


def _phases_after(start: SchedulerPhase) -> set[SchedulerPhase]:
    return _reachable(phase.TRANSITIONS, start)


@pytest.mark.parametrize("event", sorted(_START))
def test_every_start_of_a_scheduler_run_leads_to_serving_and_to_a_hand_over(event: SchedulerEvent) -> None:
    """However a run starts (a carried state, nothing), it can serve and can hand its state over."""
    first = phase.transition(SchedulerPhase.STARTING, event).next
    assert {SchedulerPhase.SERVING, SchedulerPhase.HANDED_OVER} <= _phases_after(first)


def test_every_scheduler_phase_is_reachable_and_the_hand_over_is_final() -> None:
    assert set(SchedulerPhase) == _phases_after(SchedulerPhase.STARTING)
    assert not [key for key in phase.TRANSITIONS if key[0] == SchedulerPhase.HANDED_OVER]


def test_a_carried_state_serves_at_once() -> None:
    """Loaded whole in the run's first task: no phase in which the run holds signals until its state is whole."""
    assert SchedulerPhase.SERVING == phase.transition(SchedulerPhase.STARTING, SchedulerEvent.CARRIED).next


def test_only_a_run_that_started_empty_asks_the_fleet_and_it_serves_once_rebuilt() -> None:
    asking = [key for key, step in phase.TRANSITIONS.items() if SchedulerEffect.ASK_FLEET in step.effects]
    assert [(SchedulerPhase.STARTING, SchedulerEvent.EMPTY)] == asking
    assert SchedulerPhase.SERVING == phase.transition(SchedulerPhase.REBUILDING, SchedulerEvent.REBUILT).next


@pytest.mark.parametrize("current", [SchedulerPhase.STARTING, SchedulerPhase.CLOSING])
def test_a_run_ends_only_from_serving_or_rebuilding(current: SchedulerPhase) -> None:
    """A run neither continues as new before it knows its state nor twice: the table refuses, naming phase and event."""
    with pytest.raises(InvalidTransition, match=f"scheduler in phase {current} cannot take event run_should_end"):
        phase.transition(current, SchedulerEvent.RUN_SHOULD_END)


def test_the_state_is_packed_before_it_is_let_go() -> None:
    closing = phase.transition(SchedulerPhase.SERVING, SchedulerEvent.RUN_SHOULD_END)
    assert (SchedulerPhase.CLOSING, (SchedulerEffect.PACK,)) == (closing.next, closing.effects)
    with pytest.raises(InvalidTransition):
        phase.transition(SchedulerPhase.SERVING, SchedulerEvent.LET_GO)


def test_a_stale_pack_is_packed_again_and_only_while_closing() -> None:
    """Signals that came in after the pack (the close waits a task for them) are in the next pack, never dropped."""
    again = phase.transition(SchedulerPhase.CLOSING, SchedulerEvent.STALE)
    assert (SchedulerPhase.CLOSING, (SchedulerEffect.PACK,)) == (again.next, again.effects)
    for current in set(SchedulerPhase) - {SchedulerPhase.CLOSING}:
        with pytest.raises(InvalidTransition):
            phase.transition(current, SchedulerEvent.STALE)


# -- the autoscaler's pace (workflows/fleet/autoscaler_pace.py)


def test_every_pace_is_reachable_and_each_outcome_sets_one_pace_from_anywhere() -> None:
    assert set(AutoscalerPace) == _reachable(pace.TRANSITIONS, AutoscalerPace.BUSY)
    for outcome in PlanOutcome:
        assert len({pace.transition(current, outcome).next for current in AutoscalerPace}) == 1, outcome


@pytest.mark.parametrize(
    ("acted", "moving", "may_change", "expected"),
    [
        (True, True, True, AutoscalerPace.BUSY),  # it acted: look again soon, whatever else holds
        (False, True, False, AutoscalerPace.BUSY),  # a slice boots or drains
        (False, False, True, AutoscalerPace.WATCHING),  # a slice may go idle, or a spare be taken, unannounced
        (False, False, False, AutoscalerPace.IDLE),  # only a signal can bring news
    ],
)
def test_the_pace_follows_what_the_last_plan_saw(acted: bool, moving: bool, may_change: bool,
                                                 expected: AutoscalerPace) -> None:  # fmt: skip
    for current in AutoscalerPace:
        assert expected == pace.transition(current, pace.outcome(acted, moving, may_change)).next


@pytest.mark.parametrize("scan", [0.5, 1.0, 2.0, 5.0, 30.0, 120.0])
def test_a_busier_pace_never_looks_less_often(scan: float) -> None:
    interval = timedelta(seconds=scan)
    busy, watching, idle = (pace.tick(p, interval) for p in AutoscalerPace)
    assert busy <= watching == interval <= idle
    assert busy <= pace.BUSY_TICK and idle >= pace.IDLE_TICK
