"""The cost of teams: the same sharing pass with 20 teams (quotas, borrowing, reclaim) and without, in one run.

    python -m benchmarks.scheduler_bench.teams                    # 10,000 workers x 100,000 tasks, 200 users, 20 teams
    python -m benchmarks.scheduler_bench.teams --workers 2000 --tasks 20000 --repeats 3

The input is `bench.gen`'s mixed fleet with `add_sharing` (200 users, three bands, running work on
half of the hosts). The teams pass adds 20 teams of 10 users each: each is guaranteed 4% of the
fleet's cpu and tpu chips (80% in all), every other team may borrow at most as much again, and every
third lends at most half of its quota. Both passes see the same workers, queue and running work and
are timed as `scheduler.bench` times one (building the snapshot from the parsed input, then the
pass), in pairs run back to back (which runs first alternates), so that load from other processes
falls on both alike; once under Python's default collector, once under the controller's (its pass
process collects as the controller does: far less often). The first ratio printed is the median of
the pairs' CPU ratios, the steadiest figure on a machine whose speed varies (best-of ratios there can
pair a fast moment of one pass with a slow one of the other). Printed figures, not a test: the target
is the teams pass within 1.2x of the pass without.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import replace
from typing import Any

from benchmarks.scheduler_bench import pair_order, paired_ratio
from benchmarks.scheduler_bench.gen import add_sharing, generate
from iris.controller.gc_tuning import THRESHOLDS
from scheduler.bench import parse_jobs, parse_share, parse_workers
from scheduler.scheduling import find_assignments
from scheduler.teams import Team, Teams
from scheduler.types import Resources

CONTROLLER_GC = THRESHOLDS
"""The collector thresholds the controller, and so its pass process, runs with."""


def make_teams(doc: dict[str, Any], teams: int) -> Teams:
    """`teams` teams over the input's users, in turn; quotas as the module says."""
    users = sorted({job["user"] for job in doc["jobs"]} | {run["user"] for run in doc["running"]})
    cpu = sum(int(float(w.get("cpu", 0)) * 1000) for w in doc["workers"])
    tpu = sum(int(w.get("tpus", 0) or 0) for w in doc["workers"])
    share = Resources(cpu * 4 // 100, 0, 0, tpu * 4 // 100)
    return Teams(tuple(
        Team(f"team{t:02d}", tuple(users[t::teams]), share, share if t % 2 else None,
             Resources(share.cpu_millis // 2, 0, 0, share.tpus // 2) if t % 3 == 0 else None)
        for t in range(teams)
    ))  # fmt: skip


def timed(doc: dict[str, Any], teams: Teams | None) -> tuple[float, float, int, int]:
    """One pass as scheduler.bench times it: wall seconds, cpu seconds, tasks placed, evictions."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    workers = parse_workers(doc)
    jobs = parse_jobs(doc, sharing=True)
    share = parse_share(doc)
    if teams is not None:
        share = replace(share, teams=teams)
    result = find_assignments(workers, jobs, share=share)
    return time.perf_counter() - wall, time.process_time() - cpu, len(result.assignments), len(result.evictions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    doc = add_sharing(generate(args.workers, args.tasks, args.seed), args.users, args.seed, 0.5)
    teams = make_teams(doc, args.teams)
    gc.collect()
    gc.freeze()
    print(f"== {len(doc['workers'])} workers, {args.tasks} pending tasks in {len(doc['jobs'])} jobs, "
          f"{args.users} users, {args.teams} teams")  # fmt: skip
    default = gc.get_threshold()
    # Python's default collector, then the one the controller's pass process runs with (its parent's).
    for label, thresholds in (("python's default collector", default), ("the controller's collector", CONTROLLER_GC)):
        gc.set_threshold(*thresholds)
        rows: dict[bool, list[tuple[float, float, int, int]]] = {False: [], True: []}
        for repeat in range(args.repeats):
            for with_teams in pair_order(repeat):
                rows[with_teams].append(timed(doc, teams if with_teams else None))
        print(f"-- {label}, thresholds {thresholds}")
        for with_teams, name in ((False, "no teams"), (True, "teams   ")):
            r = rows[with_teams]
            print(f"   {name}: wall median {statistics.median(x[0] for x in r):.3f} s best "
                  f"{min(x[0] for x in r):.3f} s, cpu best {min(x[1] for x in r):.3f} s, placed {r[0][2]}, "
                  f"evictions {r[0][3]}")  # fmt: skip
        wall = statistics.median(x[0] for x in rows[True]) / statistics.median(x[0] for x in rows[False])
        cpu = min(x[1] for x in rows[True]) / min(x[1] for x in rows[False])
        paired = paired_ratio([x[1] for x in rows[False]], [x[1] for x in rows[True]])
        print(f"   ratio   : {paired:.2f}x cpu, median of {args.repeats} pairs; {wall:.2f}x wall median, {cpu:.2f}x "
              "cpu best (target <= 1.2x)")  # fmt: skip
    gc.set_threshold(*default)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
