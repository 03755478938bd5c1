"""Run the scheduler and the naive first-fit baseline side by side on the same inputs.

    python -m benchmarks.scheduler_bench.compare                      # the three standard cases
    python -m benchmarks.scheduler_bench.compare INPUT.json [...]     # your own inputs
    python -m benchmarks.scheduler_bench.compare --baseline-budget 120

Standard cases: 4,000 workers x 30,000 tasks and 10,000 x 100,000 (mixed
fleets from `bench.gen`, seed 1) and a fragmented 400-worker fleet where best
fit must place strictly more coscheduled jobs than first fit. Both outputs are
checked with `bench.validate`. Both timings cover the same work: building the
snapshot from the parsed input plus placing (one pass each).

The baseline scans every worker for every task, so it can take minutes. With a
budget it stops after the job it is on when the budget runs out; the line then
says so, and the scheduler is also timed on exactly that prefix of the queue so
that the speedup compares like with like.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks.scheduler_bench.baseline import first_fit
from benchmarks.scheduler_bench.gen import generate, generate_fragmented
from benchmarks.scheduler_bench.validate import count_placed, validate
from scheduler.bench import output_document, parse_jobs, parse_workers, schedule_document


def _run_baseline(doc: dict[str, Any], budget: float | None) -> tuple[dict[str, Any], float, int, int]:
    """Time first fit; return (output doc, seconds, jobs processed, jobs total)."""
    start = time.perf_counter()
    workers = parse_workers(doc)
    jobs = parse_jobs(doc)
    assignments, processed = first_fit(workers, jobs, budget_seconds=budget)
    seconds = time.perf_counter() - start
    return output_document(assignments, seconds), seconds, processed, len(jobs)


def compare(name: str, doc: dict[str, Any], budget: float | None) -> dict[str, Any]:
    """Run both schedulers on one input, validate both, and return the figures."""
    assignments, ours_seconds = schedule_document(doc)
    ours = output_document(assignments, ours_seconds)
    base, base_seconds, processed, total = _run_baseline(doc, budget)
    row: dict[str, Any] = {
        "case": name,
        "workers": len(doc["workers"]),
        "tasks": sum(int(j["replicas"]) for j in doc["jobs"]),
        "ours_s": ours_seconds,
        "first_fit_s": base_seconds,
        "ours_errors": len(validate(doc, ours)),
        "first_fit_errors": len(validate(doc, base)),
        "complete": processed == total,
        "prefix_jobs": processed,
    }
    row["ours_tasks"], row["ours_gangs"] = count_placed(doc, ours)
    row["ff_tasks"], row["ff_gangs"] = count_placed(doc, base)
    if processed == total:
        row["speedup"] = base_seconds / ours_seconds
    else:
        prefix = {"workers": doc["workers"], "jobs": doc["jobs"][:processed]}
        prefix_assignments, prefix_seconds = schedule_document(prefix)
        row["ours_prefix_s"] = prefix_seconds
        row["ours_prefix_tasks"], row["ours_prefix_gangs"] = count_placed(
            prefix, output_document(prefix_assignments, prefix_seconds)
        )
        row["speedup"] = base_seconds / prefix_seconds
    return row


def _print(row: dict[str, Any]) -> None:
    """Print one case as a small block of aligned lines."""
    print(f"== {row['case']}: {row['workers']} workers, {row['tasks']} tasks")
    print(
        f"   scheduler : {row['ours_s']:8.3f} s  tasks placed {row['ours_tasks']:6d}  "
        f"coscheduled jobs placed {row['ours_gangs']:5d}  violations {row['ours_errors']}"
    )
    if row["complete"]:
        print(
            f"   first-fit : {row['first_fit_s']:8.3f} s  tasks placed {row['ff_tasks']:6d}  "
            f"coscheduled jobs placed {row['ff_gangs']:5d}  violations {row['first_fit_errors']}"
        )
        print(f"   speedup   : {row['speedup']:.1f}x (full run, both one pass)")
    else:
        print(
            f"   first-fit : CAPPED after {row['first_fit_s']:.1f} s at job {row['prefix_jobs']} "
            f"(a prefix of the queue): tasks placed {row['ff_tasks']}, coscheduled jobs placed "
            f"{row['ff_gangs']}, violations {row['first_fit_errors']}"
        )
        print(
            f"   scheduler on the same prefix: {row['ours_prefix_s']:.3f} s, tasks placed "
            f"{row['ours_prefix_tasks']}, coscheduled jobs placed {row['ours_prefix_gangs']}"
        )
        print(
            f"   speedup   : {row['speedup']:.1f}x on that prefix (first-fit did not finish the full queue)"
        )


def main(argv: list[str] | None = None) -> int:
    """CLI: compare on the standard cases or on given input files."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("inputs", nargs="*")
    parser.add_argument(
        "--baseline-budget",
        type=float,
        default=150.0,
        help="seconds first-fit may run per case before it is cut (0 = no limit)",
    )
    args = parser.parse_args(argv)
    budget = args.baseline_budget or None
    cases: list[tuple[str, dict[str, Any]]] = []
    if args.inputs:
        for path in args.inputs:
            with open(path) as handle:
                cases.append((path, json.load(handle)))
    else:
        cases = [
            ("mixed 4k x 30k (seed 1)", generate(4000, 30000, 1)),
            ("mixed 10k x 100k (seed 1)", generate(10000, 100000, 1)),
            ("fragmented 400", generate_fragmented(400)),
        ]
    failed = False
    for name, doc in cases:
        row = compare(name, doc, budget)
        _print(row)
        failed = failed or bool(row["ours_errors"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
