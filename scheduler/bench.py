"""Run one scheduling pass on a JSON cluster description (see /work/shared/spec/scheduler-bench.md).

    python -m scheduler.bench INPUT.json OUTPUT.json

`seconds` is the wall time of what the control plane does in one pass:
converting the parsed input into the scheduler's snapshot (WorkerSnapshot /
PendingJob values), building the index and finding all assignments. Reading
and writing the files is excluded.

The bench input lists tasks per job (`replicas`); the scheduler's PendingJob
carries them as `task_indices` 0..replicas-1. A constraint that can never
match (an ordering operator with a non-numeric value, which the scheduler's
Constraint rejects at submission) leaves its job unplaced.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.scheduling import find_assignments
from scheduler.types import Assignment, Constraint, PendingJob, Resources, WorkerSnapshot

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
    """Build the worker snapshots of a bench input."""
    return [
        WorkerSnapshot(
            worker_id=str(item["id"]), free=_resources(item), attributes=item.get("attributes") or {}
        )
        for item in doc["workers"]
    ]


def parse_jobs(doc: Document) -> list[PendingJob]:
    """Build the pending jobs of a bench input, sharing identical constraint tuples and requests.

    Sharing is what a real snapshot decoder does too (constraints repeat across
    jobs), and it lets the scheduler's feasibility cache hit by identity.
    """
    constraint_cache: dict[str, tuple[Constraint, ...] | None] = {}
    request_cache: dict[tuple[Any, ...], Resources] = {}
    indices_cache: dict[int, tuple[int, ...]] = {}
    jobs: list[PendingJob] = []
    for item in doc["jobs"]:
        raw = item.get("constraints") or []
        signature = json.dumps(raw, sort_keys=True) if raw else ""
        if signature not in constraint_cache:
            try:
                constraint_cache[signature] = tuple(
                    Constraint(c["key"], c["op"], c.get("value")) for c in raw
                )
            except ValueError:
                constraint_cache[signature] = None  # can never match: leave the job unplaced
        constraints = constraint_cache[signature]
        if constraints is None:
            continue
        shape = (item.get("cpu", 0), item.get("memory_bytes", 0), item.get("gpus", 0), item.get("tpus", 0))
        request = request_cache.get(shape)
        if request is None:
            request = request_cache[shape] = _resources(item)
        replicas = int(item["replicas"])
        indices = indices_cache.get(replicas)
        if indices is None:
            indices = indices_cache[replicas] = tuple(range(replicas))
        jobs.append(
            PendingJob(
                job_id=str(item["id"]),
                task_indices=indices,
                request=request,
                constraints=constraints,
                group_by=item.get("coschedule_group_by"),
            )
        )
    return jobs


def schedule_document(doc: Document) -> tuple[list[Assignment], float]:
    """Run one timed pass (snapshot build + index + placement) on a parsed input document."""
    start = time.perf_counter()
    workers = parse_workers(doc)
    jobs = parse_jobs(doc)
    result = find_assignments(workers, jobs)
    seconds = time.perf_counter() - start
    return list(result.assignments), seconds


def output_document(assignments: Sequence[Assignment], seconds: float) -> dict[str, Any]:
    """Render assignments in the bench's OUTPUT.json shape."""
    return {
        "assignments": [
            {"job": a.job_id, "task_index": a.task_index, "worker": a.worker_id} for a in assignments
        ],
        "seconds": seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: read INPUT.json, schedule, write OUTPUT.json; print a one-line summary to stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m scheduler.bench INPUT.json OUTPUT.json", file=sys.stderr)
        return 2
    with open(args[0]) as handle:
        doc = json.load(handle)
    assignments, seconds = schedule_document(doc)
    with open(args[1], "w") as handle:
        json.dump(output_document(assignments, seconds), handle)
    print(f"{len(assignments)} assignments in {seconds:.4f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
