"""The cost of IN and soft constraints: the same pass with them on a share of the jobs and without, in one run.

    python -m benchmarks.scheduler_bench.constraints   # 10,000 workers x 100,000 tasks, 20% of the jobs
    python -m benchmarks.scheduler_bench.constraints --workers 4000 --tasks 30000 --share 0.2 --repeats 7

The input is a mixed fleet from `bench.gen` (seed 1). `with_constraints` gives SHARE of its jobs one
more constraint, half of them a hard `zone IN [two of the three zones]`, half a soft one (a zone, a
list of zones, or a newer cpu generation, preferred). The plain pass runs the input as generated.
Each timing is what `scheduler.bench` times: building the snapshot from the parsed input plus the
pass. The passes run in pairs back to back, REPEATS pairs (which runs first alternates), so load from
other processes falls on both alike; the first ratio printed is the median of the pairs' CPU ratios
(the steadiest figure when the machine's speed varies), then the medians and the bests. Both outputs
are checked with `bench.validate`, and the soft constraints' effect is counted: of the tasks whose
job prefers something, how many run where it holds. Printed figures, not a test: the target is the
pass with them within 1.1x of the pass without.
"""

from __future__ import annotations

import argparse
import copy
import gc
import random
import statistics
import time
from typing import Any

from benchmarks.scheduler_bench import pair_order, paired_ratio
from benchmarks.scheduler_bench.gen import ZONES, generate
from benchmarks.scheduler_bench.validate import count_placed, validate
from scheduler.attributes import evaluate_all
from scheduler.bench import output_document, schedule_shared
from scheduler.types import Constraint


def with_constraints(doc: dict[str, Any], share: float, seed: int) -> tuple[dict[str, Any], int, int]:
    """A copy where `share` of the jobs carry one more constraint (half IN, half soft); the counts of each."""
    rng = random.Random(seed + 45)
    out = {**doc, "jobs": copy.deepcopy(doc["jobs"])}
    hard = soft = 0
    for job in out["jobs"]:
        if rng.random() >= share:
            continue
        if rng.random() < 0.5:
            added: dict[str, Any] = {"key": "zone", "op": "IN", "value": sorted(rng.sample(ZONES, 2))}
            hard += 1
        else:
            added = rng.choice(
                [
                    {"key": "zone", "op": "EQ", "value": rng.choice(ZONES), "soft": True},
                    {"key": "zone", "op": "IN", "value": sorted(rng.sample(ZONES, 2)), "soft": True},
                    {"key": "cpu-generation", "op": "GE", "value": 3, "soft": True},
                ]
            )
            soft += 1
        job["constraints"] = [*(job.get("constraints") or []), added]
    return out, hard, soft


def preferred_share(doc: dict[str, Any], output: dict[str, Any]) -> tuple[int, int]:
    """(tasks placed whose job has soft constraints, those of them on a worker meeting all of them)."""
    jobs = {j["id"]: j for j in doc["jobs"]}
    workers = {w["id"]: w for w in doc["workers"]}
    total = met = 0
    for a in output["assignments"]:
        prefs = [c for c in jobs[a["job"]].get("constraints") or [] if c.get("soft")]
        if prefs:
            total += 1
            wanted = [Constraint(c["key"], c["op"], c.get("value")) for c in prefs]
            met += evaluate_all(wanted, workers[a["worker"]].get("attributes") or {})
    return total, met


def measure(plain: dict[str, Any], richer: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Alternate the plain and the richer pass; return timings, CPU times, placements and violations."""
    gc.collect()
    gc.freeze()  # the parsed inputs stand for the files: their objects are not the pass's garbage to scan
    docs = {False: plain, True: richer}
    times: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, dict[str, Any]] = {}
    for repeat in range(repeats):
        for rich in pair_order(repeat):
            gc.collect()
            started = time.process_time()
            assignments, _, seconds = schedule_shared(docs[rich], sharing=False)
            cpu[rich].append(time.process_time() - started)
            times[rich].append(seconds)
            outputs[rich] = output_document(assignments, seconds)
            del assignments
    gc.unfreeze()
    return {
        "times": times,
        "cpu": cpu,
        "placed": {r: count_placed(docs[r], outputs[r]) for r in (False, True)},
        "errors": {r: validate(docs[r], outputs[r]) for r in (False, True)},
        "preferred": preferred_share(richer, outputs[True]),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: print the pass with IN and soft constraints next to the pass without."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--share", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    plain = generate(args.workers, args.tasks, args.seed)
    richer, hard, soft = with_constraints(plain, args.share, args.seed)
    print(
        f"== IN and soft constraints: {len(plain['workers'])} workers, {args.tasks} tasks in {len(plain['jobs'])} "
        f"jobs; {hard} jobs gain a hard IN, {soft} a soft constraint ({(hard + soft) / len(plain['jobs']):.0%}) "
        f"(generated in {time.perf_counter() - start:.1f} s)"
    )
    row = measure(plain, richer, args.repeats)
    for rich, label in ((False, "without"), (True, "with   ")):
        t, c = row["times"][rich], row["cpu"][rich]
        placed, gangs = row["placed"][rich]
        print(
            f"   {label}: wall median {statistics.median(t):.3f} s best {min(t):.3f} s, cpu median "
            f"{statistics.median(c):.3f} s best {min(c):.3f} s  tasks placed {placed:6d}  coscheduled jobs "
            f"placed {gangs:4d}  violations {len(row['errors'][rich])}"
        )
    total, met = row["preferred"]
    print(f"   preferences: {met} of {total} placed tasks of jobs with soft constraints run where they hold")
    ratio = statistics.median(row["times"][True]) / statistics.median(row["times"][False])
    best = min(row["times"][True]) / min(row["times"][False])
    cpu = min(row["cpu"][True]) / min(row["cpu"][False])
    paired = paired_ratio(row["cpu"][False], row["cpu"][True])
    print(f"   ratio  : {paired:.2f}x cpu, median of {args.repeats} pairs; {ratio:.2f}x wall median, {best:.2f}x wall "
          f"best, {cpu:.2f}x cpu best (target <= 1.1x)")  # fmt: skip
    for error in (row["errors"][False] + row["errors"][True])[:10]:
        print(f"   ! {error}")
    return 1 if row["errors"][False] or row["errors"][True] else 0


if __name__ == "__main__":
    raise SystemExit(main())
