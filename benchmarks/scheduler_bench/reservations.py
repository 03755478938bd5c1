"""Time one pass with reservations against the same pass without, on a bench input.

    python -m benchmarks.scheduler_bench.reservations INPUT.json [--reservations 100] [--entries 4] [--tree-share 0.02]

Adds RESERVATIONS reservations of ENTRIES entries each (each entry the size of a typical plain
task times four, no constraints) and moves a share of the queue's plain jobs into their trees
(job ids under the reserving job's). Prints both timings, the reservations held, and the tree
tasks placed inside them; the plan is checked the way the property tests check it (no tree task
outside its reservation).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from scheduler.bench import parse_jobs, parse_workers
from scheduler.reservations import Reservation, governing
from scheduler.scheduling import find_assignments
from scheduler.types import PendingJob, Resources


def with_trees(jobs: list[PendingJob], reservations: int, share: float) -> list[PendingJob]:
    """Every 1/share-th plain job moves into a reservation's tree (round robin over reservations)."""
    step = max(1, round(1 / share)) if share > 0 else 0
    out = []
    moved = 0
    for index, job in enumerate(jobs):
        if step and not job.group_by and index % step == 0:
            job = dataclasses.replace(job, job_id=f"coord-{moved % reservations}/{job.job_id}")
            moved += 1
        out.append(job)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input")
    parser.add_argument("--reservations", type=int, default=100)
    parser.add_argument("--entries", type=int, default=4)
    parser.add_argument("--tree-share", type=float, default=0.02)
    args = parser.parse_args(argv)
    with open(args.input) as handle:
        doc = json.load(handle)
    workers = parse_workers(doc)
    jobs = with_trees(parse_jobs(doc), args.reservations, args.tree_share)
    entry = Resources(4000, 16 << 30)
    reservations = [
        Reservation(f"rsv-coord-{i}", f"coord-{i}", (entry,) * args.entries, waited_seconds=float(-i))
        for i in range(args.reservations)
    ]
    start = time.perf_counter()
    plain = find_assignments(workers, jobs)
    plain_seconds = time.perf_counter() - start
    start = time.perf_counter()
    result = find_assignments(workers, jobs, reservations=reservations)
    seconds = time.perf_counter() - start
    held = {rid: dict(h) for rid, h in result.reservation_holds.items()}
    by_root = {r.job_id: r for r in reservations}
    inside = 0
    for a in result.assignments:
        owner = governing(a.job_id, by_root)
        if owner is not None:
            assert a.worker_id in held.get(owner.reservation_id, {}).values(), f"{a} outside its reservation"
            inside += 1
    trees = sum(len(j.task_indices) for j in jobs if governing(j.job_id, by_root) is not None)
    print(
        f"{len(workers)} workers, {sum(len(j.task_indices) for j in jobs)} tasks: "
        f"without reservations {plain_seconds:.3f} s ({len(plain.assignments)} placed); "
        f"with {args.reservations} x {args.entries} entries {seconds:.3f} s ({len(result.assignments)} placed, "
        f"{len(held)} reservations held, {inside} of {trees} tree tasks placed inside)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
