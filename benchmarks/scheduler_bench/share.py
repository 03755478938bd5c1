"""The cost of sharing: the same pass with bands, fair share and preemption, and without, in one run.

    python -m benchmarks.scheduler_bench.share                       # 10,000 workers x 100,000 tasks, 50 users
    python -m benchmarks.scheduler_bench.share --workers 4000 --tasks 30000 --users 20 --repeats 7

Two cases: running work on about half of the fleet, and on all of it (every
slice busy, so every pending interactive or production gang must evict).

The input is a mixed fleet from `bench.gen` with `add_sharing`: three bands,
USERS users (every tenth without credits), and running work, so pending
interactive and production jobs find eviction candidates. In each case the
two passes see the same workers (free capacity already reduced by the
running work) and the same queue; the bandless pass ignores users, bands,
credits and running work, exactly as a pass without a ShareSnapshot. Each
timing is what `scheduler.bench` times: building the snapshot from the parsed
input plus the pass. The passes alternate, REPEATS times each, so load from
other processes falls on both alike; the figures are the medians and the
best, with the best CPU time beside them (the steadiest figure when other
processes load the machine). The parsed input is frozen out of the garbage
collector and each pass starts after a collection: it stands for the file,
and the spec's timing excludes reading the file. Both outputs are checked
with `bench.validate`. Printed figures, not a test: the targets are a sharing
pass within 1.5x of the bandless one and under 0.75 s at 10k x 100k on a
quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from benchmarks.scheduler_bench.gen import add_sharing, generate
from benchmarks.scheduler_bench.validate import count_placed, validate
from scheduler.bench import output_document, schedule_shared


def measure(doc: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Alternate the bandless and the sharing pass; return timings, counts and validation errors."""
    gc.collect()
    gc.freeze()  # the parsed input stands for the file: its objects are not the pass's garbage to scan
    times: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, dict[str, Any]] = {}
    evictions = 0
    for _ in range(repeats):
        for sharing in (False, True):
            gc.collect()  # each pass starts with no garbage of the previous one
            started = time.process_time()
            assignments, evicted, seconds = schedule_shared(doc, sharing=sharing)
            cpu[sharing].append(time.process_time() - started)
            times[sharing].append(seconds)
            outputs[sharing] = output_document(assignments, seconds, evicted if sharing else None)
            if sharing:
                evictions = len(evicted)
            del assignments, evicted
    gc.unfreeze()
    bandless_doc = {"workers": doc["workers"], "jobs": doc["jobs"], "running": doc["running"]}
    return {
        "times": times,
        "cpu": cpu,
        "evictions": evictions,
        "evicted_tasks": sum(len(e["task_indices"]) for e in outputs[True]["evictions"]),
        "placed": {s: count_placed(doc, outputs[s]) for s in (False, True)},
        "errors": {False: validate(bandless_doc, outputs[False]), True: validate(doc, outputs[True])},
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: print the sharing pass next to the bandless one."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    failed = False
    for fraction in (0.5, 1.0):
        start = time.perf_counter()
        doc = add_sharing(generate(args.workers, args.tasks, args.seed), args.users, args.seed, fraction)
        failed |= _case(doc, args.tasks, args.users, args.repeats, time.perf_counter() - start, fraction)
    return 1 if failed else 0


def _case(doc: dict[str, Any], tasks: int, users: int, repeats: int, generated: float, fraction: float) -> bool:
    """Print one case; return whether either plan broke a bench rule."""
    running = sum(len(r["tasks"]) for r in doc["running"])
    print(
        f"== sharing, running work on {fraction:.0%} of the hosts: {len(doc['workers'])} workers, {tasks} pending "
        f"tasks in {len(doc['jobs'])} jobs, {users} users, 3 bands, {running} running tasks in "
        f"{len(doc['running'])} jobs (generated in {generated:.1f} s)"
    )
    row = measure(doc, repeats)
    for sharing, label in ((False, "bandless"), (True, "sharing ")):
        t, c = row["times"][sharing], row["cpu"][sharing]
        placed, gangs = row["placed"][sharing]
        print(
            f"   {label}: wall median {statistics.median(t):.3f} s best {min(t):.3f} s, cpu best {min(c):.3f} s  "
            f"tasks placed {placed:6d}  coscheduled jobs placed {gangs:4d}  violations {len(row['errors'][sharing])}"
        )
    print(f"   evictions: {row['evictions']} victims ({row['evicted_tasks']} tasks)")
    ratio = statistics.median(row["times"][True]) / statistics.median(row["times"][False])
    best = min(row["times"][True]) / min(row["times"][False])
    cpu = min(row["cpu"][True]) / min(row["cpu"][False])
    print(
        f"   ratio    : {ratio:.2f}x wall median, {best:.2f}x wall best, {cpu:.2f}x cpu best "
        "(target <= 1.5x; sharing <= 0.75 s)"
    )
    for error in (row["errors"][False] + row["errors"][True])[:10]:
        print(f"   ! {error}")
    return bool(row["errors"][False] or row["errors"][True])

if __name__ == "__main__":
    raise SystemExit(main())
