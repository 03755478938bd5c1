"""CPU time of each scheduler activation in the bench's controller: the workflow's own cost, apart from waiting.

A workflow task's duration in history (started -> completed) also counts the time the task waited in
a busy controller (other workflows, the scheduling activity's thread, a loaded machine). This runner
measures what the scheduler's code itself costs per activation: the thread's CPU time (and wall time)
in `activate`, and the creation of a run's instance (the sandbox importing the workflow's modules).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import threading
import time
from pathlib import Path
from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from iris.controller.runner_wrapper import WrappedInstance, WrappingRunner
from iris.query_retry import CLOSED_RUN_REFUSED

TOP = 8
PROFILE_DIR = "IRIS_BENCH_PROFILE_DIR"  # set: each activation runs under cProfile, the longest few are kept there
PROFILED = 3
MAX_SPANS = 20_000  # activations whose time span is kept (a 30,000 x 300,000 run has ~700)
MAX_OTHERS = 200_000  # other workflows' activations whose span is kept (a 30,000 x 300,000 run has ~2,000)


class Timings:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.top: list[list[Any]] = []  # [cpu ms, wall ms, what], longest CPU first
        # Runs replayed from their first event: a query that reached a run as it continued as new (the
        # server hands it to the closed run, which the controller no longer caches), or an eviction.
        self.replays = 0
        self.replay_cpu = 0.0  # seconds, all their replaying activations
        # Runs that had continued as new, refused such a replay (iris/controller/closed_run_guard.py).
        self.closed_refusals = 0
        self.profile_dir = os.environ.get(PROFILE_DIR) or None
        self.profiles: list[tuple[float, str, cProfile.Profile]] = []  # the longest CPU first
        # Every activation's [run id, wall-clock start and end (s), CPU ms]: what part of a long workflow task
        # (its server times in history) the scheduler's code took, and how long the task waited before and after.
        self.spans: list[list[Any]] = []
        # Every other workflow's activation in the controller, [wall-clock start, end (s)]: what the controller ran
        # while a long scheduler task waited before its code (the agents' monitors starting, the registrar).
        self.others: list[list[Any]] = []  # [start, end, the type whose run was made there or ""]

    def profiled(self, cpu: float, what: str, profile: cProfile.Profile) -> None:
        with self._lock:
            if len(self.profiles) < PROFILED or cpu > self.profiles[-1][0]:
                self.profiles.append((cpu, what, profile))
                self.profiles.sort(key=lambda row: -row[0])
                del self.profiles[PROFILED:]

    def add(self, cpu: float, wall: float, what: str, span: tuple[str, float, float] | None = None) -> None:
        with self._lock:
            self.count += 1
            if span is not None and len(self.spans) < MAX_SPANS:
                self.spans.append([*span, round(cpu * 1000, 1)])
            if len(self.top) < TOP or cpu * 1000 > self.top[-1][0]:
                self.top.append([round(cpu * 1000, 1), round(wall * 1000, 1), what])
                self.top.sort(key=lambda row: -row[0])
                del self.top[TOP:]

    def other(self, began: float, ended: float, created: str = "") -> None:
        """Another workflow's activation, or (`created`: its type) the creation of its run's instance."""
        with self._lock:
            if len(self.others) < MAX_OTHERS:
                self.others.append([began, ended, created])

    def refused_closed(self, first: bool) -> None:
        with self._lock:
            self.closed_refusals += first

    def replayed(self, cpu: float, first: bool) -> None:
        with self._lock:
            self.replays += first
            self.replay_cpu += cpu

    def write_profiles(self) -> None:
        """The kept profiles, as pstats files and a text summary (cumulative and own time), longest first."""
        if self.profile_dir is None:
            return
        out = Path(self.profile_dir)
        out.mkdir(parents=True, exist_ok=True)
        for i, (cpu, what, profile) in enumerate(self.profiles):
            profile.dump_stats(str(out / f"activation{i}.prof"))
            with (out / f"activation{i}.txt").open("w") as f:
                f.write(f"{cpu * 1000:.1f} ms CPU (under the profiler): {what}\n")
                for order in ("cumulative", "tottime"):
                    pstats.Stats(profile, stream=f).sort_stats(order).print_stats(40)

    def write(self, path: Path) -> None:
        self.write_profiles()
        path.write_text(json.dumps({
            "activations": self.count, "top": self.top, "replays": self.replays,
            "replay_cpu_ms": round(self.replay_cpu * 1000), "closed_refusals": self.closed_refusals,
            "spans": self.spans, "others": self.others,
        }))  # fmt: skip


def _refused_closed(completion: Any) -> bool:
    """Whether the closed-run guard refused the activation (a query reached a run that had continued as new)."""
    return completion is not None and completion.HasField("failed") and \
        completion.failed.failure.message.startswith(CLOSED_RUN_REFUSED)


def _commands(completion: Any) -> str:
    """What an activation ended with: the activities it scheduled by type, continue-as-new, ..."""
    if completion is None or not completion.HasField("successful"):
        return "failed"
    out = []
    for command in completion.successful.commands:
        variant = command.WhichOneof("variant") or ""
        if variant in ("schedule_activity", "schedule_local_activity"):
            out.append(getattr(command, variant).activity_type)
        else:
            out.append(variant)
    return ", ".join(out) or "nothing"


class _TimedInstance(WrappedInstance):
    def __init__(self, inner: WorkflowInstance, timings: Timings) -> None:
        super().__init__(inner)
        self._timings = timings

    def activate(self, act: Any) -> Any:
        profile = cProfile.Profile() if self._timings.profile_dir else None
        cpu, wall, began = time.thread_time(), time.perf_counter(), time.time()
        completion = None
        try:
            if profile is not None:
                profile.enable()
            completion = self._inner.activate(act)
            return completion
        finally:
            if profile is not None:
                profile.disable()
            jobs = sorted({job.WhichOneof("variant") or "" for job in act.jobs})
            what = ("replay: " if act.is_replaying else "") + ", ".join(jobs) + " -> " + _commands(completion)
            span = (act.run_id, began, time.time())
            self._timings.add(time.thread_time() - cpu, time.perf_counter() - wall, what, span)
            if profile is not None:
                self._timings.profiled(time.thread_time() - cpu, what, profile)
            if _refused_closed(completion):
                self._timings.refused_closed(first="initialize_workflow" in jobs)
            elif act.is_replaying and jobs != ["query_workflow"]:  # a query alone is flagged replaying too
                self._timings.replayed(time.thread_time() - cpu, first="initialize_workflow" in jobs)


class TimedRunner(WrappingRunner):
    """Wraps a runner; times the activations of workflows of type `workflow_type`."""

    def __init__(self, inner: WorkflowRunner, workflow_type: str, timings: Timings) -> None:
        super().__init__(inner)
        self.workflow_type = workflow_type
        self.timings = timings

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        cpu, wall, began = time.thread_time(), time.perf_counter(), time.time()
        instance = super().create_instance(det)
        if det.defn.name == self.workflow_type:
            self.timings.add(time.thread_time() - cpu, time.perf_counter() - wall, "a run's sandbox created")
        # Any new run's sandbox is made in the controller's interpreter, before its first activation.
        self.timings.other(began, time.time(), created=det.defn.name or "")
        return instance

    def wrap(self, instance: WorkflowInstance, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if det.defn.name == self.workflow_type:
            return _TimedInstance(instance, self.timings)
        return _SpannedInstance(instance, self.timings)


class _SpannedInstance(WrappedInstance):
    """Another workflow's instance: only when its activations ran (`Timings.others`)."""

    def __init__(self, inner: WorkflowInstance, timings: Timings) -> None:
        super().__init__(inner)
        self._timings = timings

    def activate(self, act: Any) -> Any:
        began = time.time()
        try:
            return self._inner.activate(act)
        finally:
            self._timings.other(began, time.time())
