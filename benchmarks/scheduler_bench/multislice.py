"""The cost of multi-slice gangs: the same fleet with and without them in the queue, in one run.

    python -m benchmarks.scheduler_bench.multislice                  # 10,000 workers x 100,000 tasks
    python -m benchmarks.scheduler_bench.multislice --workers 4000 --tasks 30000 --fraction 0.5 --repeats 7

The input is a mixed fleet from `bench.gen`; the variant turns FRACTION of its
coscheduled jobs into multi-slice gangs of 2-4 slices (`add_multislice`), the
queue keeping its number of tasks. Each timing is what `scheduler.bench` times:
building the snapshot from the parsed input plus the pass. The two passes
alternate, REPEATS times each, so load from other processes falls on both
alike; the figures are the medians and the best, with the best CPU time (the
steadiest figure on a loaded machine). Both outputs are checked with
`bench.validate` (a multi-slice gang whole on k distinct slices or absent).
Printed figures, not a test: the target is the multi-slice pass within 1.2x of
the plain one at 10k x 100k.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from benchmarks.scheduler_bench.gen import add_multislice, generate
from benchmarks.scheduler_bench.validate import count_placed, validate
from scheduler.bench import output_document, schedule_shared


def measure(docs: dict[str, dict[str, Any]], repeats: int) -> dict[str, Any]:
    """Alternate the passes of every document; timings, counts and validation errors per document."""
    gc.collect()
    gc.freeze()  # the parsed inputs stand for the files: their objects are not the pass's garbage to scan
    times: dict[str, list[float]] = {name: [] for name in docs}
    cpu: dict[str, list[float]] = {name: [] for name in docs}
    outputs: dict[str, dict[str, Any]] = {}
    for _ in range(repeats):
        for name, doc in docs.items():
            gc.collect()
            started = time.process_time()
            assignments, _, seconds = schedule_shared(doc, sharing=False)
            cpu[name].append(time.process_time() - started)
            times[name].append(seconds)
            outputs[name] = output_document(assignments, seconds)
            del assignments
    gc.unfreeze()
    return {
        "times": times,
        "cpu": cpu,
        "placed": {name: count_placed(doc, outputs[name]) for name, doc in docs.items()},
        "errors": {name: validate(doc, outputs[name]) for name, doc in docs.items()},
        "outputs": outputs,
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: print the pass with multi-slice gangs next to the one without."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--fraction", type=float, default=0.5, help="share of the gangs made multi-slice")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    plain = generate(args.workers, args.tasks, args.seed)
    docs = {"one-slice": plain, "multi-slice": add_multislice(plain, args.fraction, args.seed)}
    generated = time.perf_counter() - start
    multi = [j for j in docs["multi-slice"]["jobs"] if j.get("coschedule_num_groups")]
    gangs = sum(1 for j in plain["jobs"] if j.get("coschedule_group_by"))
    print(
        f"== multi-slice gangs: {len(plain['workers'])} workers, {args.tasks} pending tasks; {gangs} gangs, of which "
        f"{len(multi)} multi-slice ({sum(j['replicas'] for j in multi)} tasks) in the variant "
        f"(generated in {generated:.1f} s)"
    )
    row = measure(docs, args.repeats)
    placed_multi = {o["job"] for o in row["outputs"]["multi-slice"]["assignments"]} & {str(j["id"]) for j in multi}
    for name in docs:
        t, c = row["times"][name], row["cpu"][name]
        tasks, placed_gangs = row["placed"][name]
        print(
            f"   {name:11s}: wall median {statistics.median(t):.3f} s best {min(t):.3f} s, cpu best {min(c):.3f} s  "
            f"tasks placed {tasks:6d}  coscheduled jobs placed {placed_gangs:4d}  violations {len(row['errors'][name])}"
        )
    print(f"   multi-slice gangs placed: {len(placed_multi)} of {len(multi)}")
    times = row["times"]
    ratio = statistics.median(times["multi-slice"]) / statistics.median(times["one-slice"])
    best = min(times["multi-slice"]) / min(times["one-slice"])
    cpu = min(row["cpu"]["multi-slice"]) / min(row["cpu"]["one-slice"])
    print(f"   ratio      : {ratio:.2f}x wall median, {best:.2f}x wall best, {cpu:.2f}x cpu best (target <= 1.2x)")
    errors = row["errors"]["one-slice"] + row["errors"]["multi-slice"]
    for error in errors[:10]:
        print(f"   ! {error}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
