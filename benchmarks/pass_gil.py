"""What a big scheduling pass costs the controller's other Python code: in a thread, or in the pass process.

`python -m benchmarks.pass_gil [--workers 10000] [--pending 100000]` runs short CPU-bound "tasks" (each ~TASK_MS
of pure Python, as a scheduler workflow task is) back to back in the main thread while scheduling passes over a
generated snapshot run (a) nowhere, (b) in a thread of this process, as the controller ran them before, and (c)
in the pass process (activities.pass_pool). It prints each task's wall time against its CPU time: in (b) the pass
holds the GIL and the tasks wait for it; in (c) they only share the machine's cores. One process, no server:
cheap enough to run beside the scale bench, whose workflow task times also count the dev server and the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence

from activities.pass_pool import POOL
from activities.scheduling import plan_pass
from iris.controller.gc_tuning import tune_for_controller
from workflows.messages import ConstraintSpec, SchedulingSpec
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.snapshot_cache import encode_snapshot

TASK_MS = 20.0  # CPU of one task, calibrated at start
PAUSE_S = 0.005  # between tasks, as a controller's workflow tasks come one after another under load
PASSES = 4  # per mode


def snapshot(workers: int, pending: int, tasks_per_job: int = 10) -> bytes:
    """The scale bench's shape: 8-cpu hosts in four zones, 0.5-cpu tasks in jobs of ten, all queued."""
    state = SchedulerState(store_url="memory://bench")
    for i in range(workers):
        state.workers[f"bench-{i:05d}"] = WorkerEntry(f"bench-{i:05d}", f"session-{i // 100}", 8000, 32 << 30, 0, 0,
                                                     {"pool": "bench", "zone": f"zone-{i % 4}"})  # fmt: skip
    spec = SchedulingSpec(500, 1 << 30, constraints=[ConstraintSpec("pool", "EQ", "bench")])
    for j in range((pending + tasks_per_job - 1) // tasks_per_job):
        n = min(tasks_per_job, pending - j * tasks_per_job)
        state.pending[f"job-{j:06d}"] = PendingEntry(f"job-{j:06d}", spec, dict.fromkeys(range(n), 0), 1e9)
    return encode_snapshot(state, 1e9 + 5)


def _work(n: int) -> int:
    table = {i: str(i) for i in range(n)}
    return sum(len(v) for v in table.values())


def calibrate() -> int:
    """Loop size of a task of ~TASK_MS CPU on this machine."""
    n = 10_000
    while True:
        start = time.thread_time()
        _work(n)
        spent = (time.thread_time() - start) * 1000
        if spent >= TASK_MS / 4:
            return int(n * TASK_MS / spent)
        n *= 2


def tasks_while(background: Callable[[], object] | None, size: int, seconds: float) -> list[tuple[float, float]]:
    """(wall, cpu) seconds of each task run while `background` runs (or for `seconds` with none)."""
    done = threading.Event()
    if background is not None:

        def run() -> None:
            try:
                background()
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
    else:
        threading.Timer(seconds, done.set).start()
    out = []
    while not done.is_set():
        wall, cpu = time.perf_counter(), time.thread_time()
        _work(size)
        out.append((time.perf_counter() - wall, time.thread_time() - cpu))
        time.sleep(PAUSE_S)
    return out


def line(name: str, rows: list[tuple[float, float]]) -> str:
    walls = sorted(w * 1000 for w, _ in rows)
    ratio = sum(w for w, _ in rows) / max(1e-9, sum(c for _, c in rows))
    p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
    return (f"  {name:26s} {len(rows):5d} tasks  wall median {statistics.median(walls):6.0f} ms  p99 {p99:6.0f} ms"
            f"  max {walls[-1]:6.0f} ms  (CPU median {statistics.median(c * 1000 for _, c in rows):3.0f} ms;"
            f" wall/CPU {ratio:.2f})")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pass_gil", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=10_000, help="hosts in the snapshot (default 10000)")
    parser.add_argument("--pending", type=int, default=100_000, help="queued tasks (default 100000)")
    args = parser.parse_args(argv)
    tune_for_controller()
    data = snapshot(args.workers, args.pending)
    size = calibrate()
    started = time.perf_counter()
    POOL.run(len, b"")  # starts the pass process, not measured
    print(f"pass process started in {time.perf_counter() - started:.2f} s")
    POOL.run(plan_pass, data)  # its first pass imports the pass's module
    started = time.perf_counter()
    plan_pass(data)
    one_pass = time.perf_counter() - started
    try:
        in_thread = tasks_while(lambda: [plan_pass(data) for _ in range(PASSES)], size, 0)
        in_child = tasks_while(lambda: [POOL.run(plan_pass, data) for _ in range(PASSES)], size, 0)
        alone = tasks_while(None, size, one_pass * PASSES)
    finally:
        POOL.shutdown()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{args.workers} workers x {args.pending} pending: snapshot {len(data) / 1024:.0f} KiB, one pass"
        f" {one_pass:.2f} s; tasks of ~{TASK_MS:.0f} ms CPU; load average {load}"
    )
    print(line("no pass", alone))
    print(line("pass in a thread (before)", in_thread))
    print(line("pass in the pass process", in_child))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
