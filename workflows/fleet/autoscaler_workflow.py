"""AutoscalerWorkflow: the singleton that grows and shrinks the fleet in whole slices.

When woken, a local activity reads the scheduler's snapshot and runs the
pure planner (`scheduler.autoscale.plan_scaling`); the workflow then starts a
SliceWorkflow per new slice (through an activity, id = slice id, so a retried
start never makes a second one) and asks idle slices to scale down. Slices are
not its children: each tells it of its state changes with a `slice_state`
signal. A group backs off exponentially after a quota error or after repeated
failures to bring a slice up, and says why in `status`.

It does not poll when there is nothing to do. What wakes it: the scheduler's
`wake` signal when a pass leaves a job unplaced that was not before (sent with
the pass's other deliveries), a slice's state change, a new configuration, and
the plan's own deadlines (an idle slice's scale_down_delay, a back-off or
scale_up_delay ending). It looks every `scan_interval` only while something may
change unannounced: READY slices with work (to see them go idle) in a group that
may shrink, and idle slices of a group that keeps `buffer_slices` (to see a job
take one); every BUSY_TICK while slices boot or drain; otherwise IDLE_TICK, a
backstop of minutes: the pace, a table of its own (autoscaler_pace).

State lives in one dataclass handed whole to continue-as-new.
"""

from __future__ import annotations

import contextlib
import math
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        AUTOSCALER_WORKFLOW_ID,
        CONFIGURE_AUTOSCALER,
        HEADROOM,
        SCALE_DOWN,
        SCHEDULER_WORKFLOW_ID,
        SLICE_STATE,
        WAKE_AUTOSCALER,
    )
    from activities.contracts.fleet import (
        AUTOSCALE_PLAN,
        CLEANUP_ORPHANS,
        KNOWN_SLICES,
        START_SLICE,
        GroupInput,
        KnownSlice,
        OrphanCleanup,
        PlanInput,
        PlanResult,
        SliceViewInput,
        StartSlice,
    )
    from scheduler.spot import FallbackRecord  # noqa: F401 - GroupRuntime's field, decoded through the sandbox
    from workflows.fleet.autoscaler_capacity import group_policy, note_lost, slice_capacity
    from workflows.fleet.autoscaler_pace import AutoscalerPace
    from workflows.fleet.autoscaler_pace import outcome as plan_outcome
    from workflows.fleet.autoscaler_pace import tick as pace_tick
    from workflows.fleet.autoscaler_pace import transition as pace_transition
    from workflows.fleet.autoscaler_state import (
        BACKOFF_BASE_SECONDS,
        AutoscalerConfig,
        AutoscalerState,
        AutoscalerStatus,
        GroupRuntime,
        GroupStatus,
        ScaleGroup,
        SliceEntry,
    )
    from workflows.fleet.slice_lifecycle import SliceState
    from workflows.fleet.slice_workflow import ScaleDown, SliceInput, SliceUpdate

PREEMPTED = "SlicePreempted"  # a lost READY slice: replaced without backing off
IN_FLIGHT = (SliceState.CREATING, SliceState.BOOTSTRAPPING)
GONE = (SliceState.FAILED, SliceState.TERMINATED)


@workflow.defn(name="AutoscalerWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class AutoscalerWorkflow:
    @workflow.init
    def __init__(self, state: AutoscalerState | None = None) -> None:
        self.state = state or AutoscalerState()
        self._wake = False
        self._pace = AutoscalerPace.BUSY  # how often it looks (workflows/fleet/autoscaler_pace.py)
        self._recheck_after: float | None = None  # the last plan's next deadline, seconds
        self._headroom_told: list[list[Any]] | None = None  # what the scheduler was last told (again after a new run)

    @workflow.run
    async def run(self, state: AutoscalerState | None = None) -> None:
        if not self.state.recovered:
            await self._recover()
        while True:
            await workflow.wait_condition(lambda: self.state.config is not None)
            if self.state.cleanup_needed:
                await self._cleanup_orphans()
            config = self.state.config
            self._recheck_after = None
            if config is not None and config.groups:
                plan = await workflow.execute_local_activity(
                    AUTOSCALE_PLAN, self._plan_input(config), result_type=PlanResult,
                    start_to_close_timeout=timedelta(seconds=30),
                )  # fmt: skip
                if plan.error:
                    workflow.logger.warning("autoscaler: no plan this tick: %s", plan.error)
                    self._recheck_after = config.scan_interval_seconds  # ask again soon: a wake may be lost
                else:
                    await self._apply(config, plan)
                    await self._tell_headroom(plan.headroom)
            self._publish()
            info = workflow.info()
            if info.is_continue_as_new_suggested() or info.is_target_worker_deployment_version_changed():
                # A new run also when operators made another build current: runs are pinned to the
                # build that started them, and the next one starts on the current build.
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    self.state, initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
                )
            tick = self._tick(config)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._wake, timeout=tick)
            self._wake = False

    # -- one tick ---------------------------------------------------------------------------------

    def _tick(self, config: AutoscalerConfig | None) -> timedelta | None:
        """How long to wait for a signal before the next look: the pace's tick (autoscaler_pace.tick), sooner
        when the last plan has a deadline (an idle slice's scale_down_delay, a backoff ending)."""
        if config is None or not config.groups:
            return None  # no scale group, no timer: an autoscaler with nothing to scale writes no history
        tick = pace_tick(self._pace, timedelta(seconds=config.scan_interval_seconds))
        if self._recheck_after is not None:
            tick = min(tick, timedelta(seconds=self._recheck_after))
        return tick

    def _plan_input(self, config: AutoscalerConfig) -> PlanInput:
        groups = []
        for g in config.groups:
            rt = self.state.groups.setdefault(g.spec.name, GroupRuntime())
            groups.append(GroupInput(g.spec, g.min_slices, g.max_slices, g.scale_up_delay, g.scale_down_delay,
                                     rt.last_scale_up, rt.backoff_until, rt.backoff_reason,
                                     buffer_slices=g.buffer_slices))  # fmt: skip
        slices = [SliceViewInput(s.slice_id, s.group, s.state, s.worker_ids, s.idle_since)
                  for s in self.state.slices.values()]  # fmt: skip
        return PlanInput(groups, slices, workflow.now().timestamp())

    async def _apply(self, config: AutoscalerConfig, plan: PlanResult) -> None:
        for slice_id, since in plan.idle_since.items():
            if slice_id in self.state.slices:
                self.state.slices[slice_id].idle_since = since
        self.state.unmet, self.state.group_reasons = plan.unmet, plan.group_reasons
        self.state.pending_jobs = plan.pending_jobs
        self._recheck_after = plan.recheck_after
        by_name = {g.spec.name: g for g in config.groups}
        for slice_id in plan.remove:
            entry = self.state.slices.get(slice_id)
            if entry is None:
                continue
            entry.state = SliceState.DRAINING
            delay = by_name[entry.group].scale_down_delay if entry.group in by_name else 0.0
            self._decided(entry.group, f"scaled down {slice_id}: idle for {delay:g}s (scale_down_delay)")
            try:
                await workflow.get_external_workflow_handle(slice_id).signal(
                    SCALE_DOWN, ScaleDown(f"idle for {delay:g}s", config.drain_timeout_seconds, only_if_idle=True)
                )
            except Exception as err:  # its workflow ended: it is gone already
                workflow.logger.warning("autoscaler: %s not told to scale down: %s", slice_id, err)
                self.state.slices.pop(slice_id, None)
        for group_name, count in plan.create.items():
            group = by_name.get(group_name)
            started = []
            for _ in range(count if group is not None else 0):
                assert group is not None
                started.append(await self._start_slice(config, group))
            if any(started):
                self._decided(group_name, f"scaled up: started {', '.join(s for s in started if s)} for pending work")
        saw = plan_outcome(
            acted=bool(plan.create or plan.remove),
            slices_moving=any(s.state != SliceState.READY for s in self.state.slices.values()),
            may_change=self._slices_may_change(config),
        )
        self._pace = pace_transition(self._pace, saw).next

    def _slices_may_change(self, config: AutoscalerConfig) -> bool:
        """Whether a slice may change in a way no signal announces: a READY slice with work may go idle (its
        idle time counts from when it is seen idle) in a group above min_slices, and a job may take an idle
        slice of a group that keeps `buffer_slices` (a new spare is due)."""
        for g in config.groups:
            ready = [s for s in self.state.slices.values() if s.group == g.spec.name and s.state == SliceState.READY]
            if g.buffer_slices and ready:
                return True
            live = sum(1 for s in self.state.slices.values() if s.group == g.spec.name)
            if live > g.min_slices and any(s.idle_since is None for s in ready):
                return True
        return False

    async def _tell_headroom(self, rows: list[list[Any]]) -> None:
        """Tell the scheduler what each group can still bring when that changed (its preemption rule:
        a job that a new slice can serve waits for it instead of evicting anyone)."""
        if rows == self._headroom_told:
            return
        try:
            await workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(HEADROOM, rows)
            self._headroom_told = rows
        except Exception as err:  # no scheduler yet: told at the next tick
            workflow.logger.warning("autoscaler: headroom not told to the scheduler: %s", err)

    def _decided(self, group: str, decision: str) -> None:
        rt = self.state.groups.setdefault(group, GroupRuntime())
        rt.last_decision, rt.last_decision_at = decision, workflow.now().timestamp()

    async def _start_slice(self, config: AutoscalerConfig, group: ScaleGroup) -> str | None:
        spec = group.spec
        slice_id = f"{spec.name}-{workflow.uuid4().hex[:8]}"
        now = workflow.now().timestamp()
        rt = self.state.groups.setdefault(spec.name, GroupRuntime())
        spec, capacity = slice_capacity(spec, rt, now)  # spot or on-demand (autoscaler_capacity)
        self.state.slices[slice_id] = SliceEntry(slice_id, spec.name, SliceState.CREATING,
                                                 capacity=capacity.capacity.value if capacity else "")  # fmt: skip
        rt.last_scale_up = now
        if capacity is not None and capacity.reason:
            workflow.logger.info("autoscaler: slice %s of %s on demand: %s", slice_id, spec.name, capacity.reason)
        inp = SliceInput(slice_id, spec, AUTOSCALER_WORKFLOW_ID, config.registration_timeout_seconds,
                         heartbeat_timeout_seconds=config.slice_heartbeat_seconds)
        summary = f"slice {slice_id}: group {spec.name}, {spec.hosts_per_slice} x {spec.platform} hosts"
        try:
            await workflow.execute_activity(
                START_SLICE, StartSlice(slice_id, inp, summary), start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=10)),
            )  # fmt: skip
        except ActivityError as err:
            self.state.slices.pop(slice_id, None)
            self._failed(spec.name, f"could not start slice workflow: {err.cause or err}", "")
            return None
        workflow.logger.info("autoscaler: started slice %s of %s", slice_id, spec.name)
        return slice_id

    async def _recover(self) -> None:
        """A fresh autoscaler (not a continue-as-new) adopts the slices that are running already."""
        known: list[KnownSlice] = await workflow.execute_activity(
            KNOWN_SLICES, start_to_close_timeout=timedelta(seconds=60), result_type=list[KnownSlice],
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=10),
        )  # fmt: skip
        for k in known:
            if k.slice_id not in self.state.slices and k.state not in GONE:
                self.state.slices[k.slice_id] = SliceEntry(k.slice_id, k.group, SliceState(k.state), k.worker_ids)
        self.state.recovered = True

    async def _cleanup_orphans(self) -> None:
        config = self.state.config
        self.state.cleanup_needed = False
        if config is None or not config.groups:
            return
        try:
            cleaned: list[str] = await workflow.execute_activity(
                CLEANUP_ORPHANS, OrphanCleanup([g.spec for g in config.groups]), result_type=list[str],
                start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )  # fmt: skip
        except ActivityError as err:
            workflow.logger.warning("autoscaler: orphan cleanup failed: %s", err.cause or err)
            return
        if cleaned:
            workflow.logger.warning("autoscaler: terminated orphan slices %s", cleaned)

    def _failed(self, group: str, error: str, error_type: str) -> None:
        """A slice of `group` failed: count it, and back the group off (at once on quota or refusal)."""
        rt = self.state.groups.setdefault(group, GroupRuntime())
        base = self.state.config.backoff_seconds if self.state.config is not None else BACKOFF_BASE_SECONDS
        delay = rt.fail(error, error_type, workflow.now().timestamp(), base)
        if delay is not None:
            self._decided(group, f"backed off {delay:g}s after {error_type or 'a failed slice'}")
            workflow.logger.warning("autoscaler: group %s backs off %gs: %s", group, delay, rt.backoff_reason)

    def _publish(self) -> None:
        counts: dict[str, int] = {}
        for s in self.state.slices.values():
            counts[s.state] = counts.get(s.state, 0) + 1
        summary = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items())) or "no slices"
        waiting = f"; {len(self.state.unmet)} jobs no group will take" if self.state.unmet else ""
        workflow.set_current_details(f"{summary}{waiting}")

    # -- handlers -------------------------------------------------------------------------------

    @workflow.signal(name=CONFIGURE_AUTOSCALER)
    def configure(self, config: AutoscalerConfig) -> None:
        """New scale groups. A group whose configuration changed starts without its back-off: what made its
        slices fail (a refused accelerator type, a missing permission) may be what was changed."""
        before = {g.spec.name: g for g in self.state.config.groups} if self.state.config else {}
        for g in config.groups:
            rt = self.state.groups.get(g.spec.name)
            if rt is not None and rt.backoff_until is not None and before.get(g.spec.name, g) != g:
                rt.failures, rt.backoff_until, rt.backoff_reason = 0, None, ""
                self._decided(g.spec.name, "back-off cleared: the group's configuration changed")
        self.state.config = config
        self.state.cleanup_needed = True
        self._wake = True

    @workflow.signal(name=SLICE_STATE)
    def slice_state(self, update: SliceUpdate) -> None:
        """A slice moved: keep its state; count failures, clear them when a slice comes up."""
        entry = self.state.slices.get(update.slice_id)
        if update.state in GONE:
            self.state.slices.pop(update.slice_id, None)
        elif entry is None:
            self.state.slices[update.slice_id] = SliceEntry(update.slice_id, update.group, update.state,
                                                            list(update.worker_ids))  # fmt: skip
        elif entry.state == SliceState.DRAINING and update.state == SliceState.READY:
            # Asked to go for being idle, it got work meanwhile: it stays, and idle counts again from now.
            entry.state, entry.idle_since = SliceState.READY, None
        elif entry.state != SliceState.DRAINING or update.state == SliceState.DRAINING:
            entry.state, entry.worker_ids, entry.error = update.state, list(update.worker_ids), update.error
        rt = self.state.groups.setdefault(update.group, GroupRuntime())
        if update.placement and update.state == SliceState.BOOTSTRAPPING:
            rt.last_placement = f"slice {update.slice_id} {update.placement}"
        fell_back = False
        groups = self.state.config.groups if self.state.config else []
        group = next((g for g in groups if g.spec.name == update.group), None)
        if update.state == SliceState.FAILED and group is not None:
            now = workflow.now().timestamp()
            fell_back = note_lost(group.spec, rt, entry, update.error, update.error_type, now)
            if fell_back:
                self._decided(update.group, f"spot fallback: new slices on demand for a while ({rt.spot.reason})")
        if update.state == SliceState.READY:
            rt.failures, rt.backoff_until, rt.backoff_reason = 0, None, ""
        elif update.state == SliceState.FAILED and update.error_type != PREEMPTED and not fell_back:
            self._failed(update.group, update.error, update.error_type)
        self._wake = True

    @workflow.signal(name=WAKE_AUTOSCALER)
    def wake(self, unplaced: int) -> None:
        """The scheduler left `unplaced` jobs waiting that were not before: look at demand now."""
        self._wake = True

    @workflow.query
    def status(self) -> AutoscalerStatus:
        now = workflow.now().timestamp()
        out = AutoscalerStatus(unmet=dict(self.state.unmet), pending_jobs=self.state.pending_jobs)
        config = self.state.config or AutoscalerConfig()
        for g in config.groups:
            name = g.spec.name
            rt = self.state.groups.get(name, GroupRuntime())
            by_state: dict[str, list[str]] = {}
            for s in self.state.slices.values():
                if s.group == name:
                    by_state.setdefault(s.state, []).append(s.slice_id)
            backing_off = rt.backoff_until is not None and rt.backoff_until > now
            out.groups.append(
                GroupStatus(
                    name=name, platform=g.spec.platform, min_slices=g.min_slices, max_slices=g.max_slices,
                    slices=by_state, reason=self.state.group_reasons.get(name, ""),
                    backoff_reason=rt.backoff_reason if backing_off else "",
                    backoff_seconds=math.ceil(rt.backoff_until - now) if backing_off and rt.backoff_until else 0.0,
                    last_error=rt.last_error, last_error_type=rt.last_error_type,
                    last_decision=rt.last_decision, last_decision_at=rt.last_decision_at,
                    idle_since={s.slice_id: s.idle_since for s in self.state.slices.values()
                                if s.group == name and s.idle_since is not None},
                    scale_down_delay=g.scale_down_delay, buffer_slices=g.buffer_slices,
                    last_placement=rt.last_placement,
                    capacity_policy=policy.kind.value if (policy := group_policy(g.spec)) else "",
                    capacity={s.slice_id: s.capacity for s in self.state.slices.values()
                              if s.group == name and s.capacity},
                    fallback_reason=rt.spot.reason if rt.spot.until and rt.spot.until > now else "",
                    fallback_until=rt.spot.until if rt.spot.until and rt.spot.until > now else 0.0,
                )
            )  # fmt: skip
        return out
