"""Run one scheduling pass on a JSON cluster description (the format: shared/spec/scheduler-bench.md).

    python -m scheduler.bench INPUT.json OUTPUT.json

`seconds` is the wall time of what the control plane does in one pass:
converting the parsed input into the scheduler's snapshot (WorkerSnapshot /
PendingJob values), building the index and finding all assignments. Reading
and writing the files is excluded. The pass runs with the garbage collector's
thresholds the control plane's passes run with (`PASS_GC_THRESHOLDS`).

The bench input lists tasks per job (`replicas`); the scheduler's PendingJob
carries them as `task_indices` 0..replicas-1. A constraint that can never
match (an ordering operator with a non-numeric value, which the scheduler's
Constraint rejects at submission) leaves its job unplaced.

Richer constraints (optional; an input without them runs exactly as the spec says): `op` may
also be "IN" or "NOT_IN" with `value` a JSON list of values of one type, and a constraint may
carry `"soft": true`, a preference (`scheduler.preferences`): it ranks the workers the hard
constraints allow and never leaves a job unplaced (`bench.validate` does not check it).

Multi-slice gangs (optional): a coscheduled job may carry `"coschedule_num_groups": k`;
its replicas are then split evenly over k distinct values of `coschedule_group_by`
(`scheduler.multislice`), task i on slice `i // (replicas / k)`.

Sharing (optional fields; an input without them runs exactly as the spec says):

- a job may carry `"user": "ana"` and `"priority": "production" | "interactive" | "batch"`;
- the document may carry `"now"` (seconds), `"default_credits"`, `"users"`
  (`{"ana": {"credits": 10.0, "usage": 3.5}}`, usage being decayed usage as of
  `now`), and `"running"`: running work that holds capacity and may be evicted,
  `{"id", "user", "priority", "cpu", "memory_bytes", "gpus", "tpus",
  "coscheduled", "tasks": [{"task_index", "worker", "started_at"}]}`. A
  worker's listed resources are then its capacity; its free capacity is that
  minus its running tasks.

With any of these the pass runs with a `ShareSnapshot`, and OUTPUT.json gains
`"evictions": [{"job", "task_indices", "preemptor"}]` (`bench.validate` checks
them: whole gangs, strictly lower bands, placed preemptors, capacity once the
victims are gone).
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.accounting import DEFAULT_CREDITS, DecayedUsage, UserAccount
from scheduler.attributes import split_soft
from scheduler.scheduling import find_assignments
from scheduler.sharing import RunningJob, RunningTask, ShareSnapshot
from scheduler.types import Assignment, Band, Constraint, Eviction, PendingJob, Resources, WorkerSnapshot, parse_band

SHARING_KEYS = ("now", "default_credits", "users", "running")

PASS_GC_THRESHOLDS = (50_000, 20, 100)
"""The collector's thresholds in the control plane: its controller sets them (iris/controller/gc_tuning.py, which
says why) and its pass process inherits them (activities/pass_pool.py). A pass makes ~100,000 assignments at
10,000 x 100,000; under Python's default (700, 10, 10) every 700 of them ran a collection, and the older
generations' ones scanned the index: a sixth of the pass's time on a quiet machine, more on a busy one."""

Document = Mapping[str, Any]


def _resources(item: Mapping[str, Any]) -> Resources:
    """Convert a bench resource record (cpu in cores) into integer Resources (cpu in millicores)."""
    return Resources(
        cpu_millis=round(float(item.get("cpu", 0)) * 1000),
        memory_bytes=int(item.get("memory_bytes", 0)),
        gpus=int(item.get("gpus", 0)),
        tpus=int(item.get("tpus", 0)),
    )


def parse_workers(doc: Document) -> list[WorkerSnapshot]:
    """Build the worker snapshots of a bench input (free = capacity minus running tasks, if any)."""
    running = doc.get("running")
    if not running:
        shapes: dict[tuple[Any, ...], Resources] = {}  # a fleet has a few distinct capacities: each converted once
        out = []
        for item in doc["workers"]:
            shape = (item.get("cpu", 0), item.get("memory_bytes", 0), item.get("gpus", 0), item.get("tpus", 0))
            free = shapes.get(shape)
            if free is None:
                free = shapes[shape] = _resources(item)
            out.append(WorkerSnapshot(str(item["id"]), free, item.get("attributes") or {}))
        return out
    used: dict[str, list[int]] = {}
    for run in running:
        request = _resources(run)
        vector = (request.cpu_millis, request.memory_bytes, request.gpus, request.tpus)
        for task in run["tasks"]:
            total = used.setdefault(str(task["worker"]), [0, 0, 0, 0])
            for d in range(4):
                total[d] += vector[d]
    out = []
    for item in doc["workers"]:
        capacity = _resources(item)
        taken = used.get(str(item["id"]))
        free = capacity - Resources(*taken) if taken is not None else capacity
        out.append(WorkerSnapshot(str(item["id"]), free, item.get("attributes") or {}, capacity))
    return out


def uses_sharing(doc: Document) -> bool:
    """Whether the input has any sharing field (then the pass runs with a ShareSnapshot)."""
    return any(key in doc for key in SHARING_KEYS) or any(
        "user" in job or "priority" in job for job in doc["jobs"]
    )


def parse_share(doc: Document) -> ShareSnapshot:
    """Build the ShareSnapshot of a bench input."""
    now = float(doc.get("now", 0.0))
    users = {
        str(name): UserAccount(
            str(name), float(item.get("credits", 0.0)), usage=DecayedUsage(float(item.get("usage", 0.0)), now)
        )
        for name, item in (doc.get("users") or {}).items()
    }
    running = [
        RunningJob(
            str(run["id"]),
            str(run.get("user", "")),
            parse_band(run.get("priority", "interactive"), "running.priority"),
            _resources(run),
            tuple(
                RunningTask(int(t["task_index"]), str(t["worker"]), float(t.get("started_at", now)))
                for t in run["tasks"]
            ),
            bool(run.get("coscheduled", False)),
        )
        for run in doc.get("running") or []
    ]
    return ShareSnapshot(
        now=now, users=users, default_credits=float(doc.get("default_credits", DEFAULT_CREDITS)), running=running
    )


def parse_jobs(doc: Document, *, sharing: bool = False) -> list[PendingJob]:
    """Build the pending jobs of a bench input, sharing identical constraint tuples and requests.

    Sharing is what a real snapshot decoder does too (constraints repeat across
    jobs), and it lets the scheduler's feasibility cache hit by identity. With
    `sharing` each job also gets its band and user.
    """
    constraint_cache: dict[str, tuple[tuple[Constraint, ...], tuple[Constraint, ...]] | None] = {}
    request_cache: dict[tuple[Any, ...], Resources] = {}
    indices_cache: dict[int, tuple[int, ...]] = {}
    band_cache: dict[Any, Band] = {}
    jobs: list[PendingJob] = []
    for item in doc["jobs"]:
        raw = item.get("constraints") or []
        signature = json.dumps(raw, sort_keys=True) if raw else ""
        if signature not in constraint_cache:
            try:
                constraint_cache[signature] = split_soft(
                    Constraint(c["key"], c["op"], c.get("value"), bool(c.get("soft", False))) for c in raw
                )
            except ValueError:
                constraint_cache[signature] = None  # can never match: leave the job unplaced
        split = constraint_cache[signature]
        if split is None:
            continue
        constraints, preferences = split
        shape = (item.get("cpu", 0), item.get("memory_bytes", 0), item.get("gpus", 0), item.get("tpus", 0))
        request = request_cache.get(shape)
        if request is None:
            request = request_cache[shape] = _resources(item)
        replicas = int(item["replicas"])
        indices = indices_cache.get(replicas)
        if indices is None:
            indices = indices_cache[replicas] = tuple(range(replicas))
        if sharing:
            raw_band = item.get("priority", "interactive")
            band = band_cache.get(raw_band)
            if band is None:
                band = band_cache[raw_band] = parse_band(raw_band, f"jobs[{item['id']}].priority")
            job = PendingJob(
                job_id=str(item["id"]),
                task_indices=indices,
                request=request,
                constraints=constraints,
                group_by=item.get("coschedule_group_by"),
                band=band,
                user=str(item.get("user", "")),
                num_groups=int(item.get("coschedule_num_groups") or 1),
                preferences=preferences,
            )
        else:
            job = PendingJob(
                job_id=str(item["id"]),
                task_indices=indices,
                request=request,
                constraints=constraints,
                group_by=item.get("coschedule_group_by"),
                num_groups=int(item.get("coschedule_num_groups") or 1),
                preferences=preferences,
            )
        jobs.append(job)
    return jobs


def schedule_document(doc: Document) -> tuple[list[Assignment], float]:
    """Run one timed pass (snapshot build + index + placement) on a parsed input document."""
    assignments, _, seconds = schedule_shared(doc, sharing=uses_sharing(doc))
    return assignments, seconds


def schedule_shared(doc: Document, *, sharing: bool) -> tuple[list[Assignment], list[Eviction], float]:
    """One timed pass, with a ShareSnapshot or without (bands, users and credits then ignored)."""
    start = time.perf_counter()
    workers = parse_workers(doc)
    jobs = parse_jobs(doc, sharing=sharing)
    share = parse_share(doc) if sharing else None
    result = find_assignments(workers, jobs, share=share)
    seconds = time.perf_counter() - start
    return list(result.assignments), list(result.evictions), seconds


def output_document(
    assignments: Sequence[Assignment], seconds: float, evictions: Sequence[Eviction] | None = None
) -> dict[str, Any]:
    """Render assignments (and, with sharing, evictions) in the bench's OUTPUT.json shape."""
    out: dict[str, Any] = {
        "assignments": [
            {"job": a.job_id, "task_index": a.task_index, "worker": a.worker_id} for a in assignments
        ],
        "seconds": seconds,
    }
    if evictions is not None:
        out["evictions"] = [
            {"job": e.job_id, "task_indices": list(e.task_indices), "preemptor": e.preemptor} for e in evictions
        ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: read INPUT.json, schedule, write OUTPUT.json; print a one-line summary to stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m scheduler.bench INPUT.json OUTPUT.json", file=sys.stderr)
        return 2
    with open(args[0]) as handle:
        doc = json.load(handle)
    gc.set_threshold(*PASS_GC_THRESHOLDS)  # as the control plane's pass runs
    sharing = uses_sharing(doc)
    assignments, evictions, seconds = schedule_shared(doc, sharing=sharing)
    with open(args[1], "w") as handle:
        json.dump(output_document(assignments, seconds, evictions if sharing else None), handle)
    extra = f", {len(evictions)} evictions" if sharing else ""
    print(f"{len(assignments)} assignments{extra} in {seconds:.4f} s", file=sys.stderr)
    return 0

