"""`python -m benchmarks state-probe`: the scheduler's carried state today vs the same state as protobuf messages.

A probe for the next step of the schema work (issue 42: "workflow tasks light by construction"). No server: the
snapshot bench's state (`--workers`, `--placed` tasks and `--pending` queued tasks in jobs of `--tasks-per-job`)
is packed and loaded the way a scheduler run hands it over today (workflows/scheduler/scheduler_carry.py: since
2026-12-05 protobuf columns and rows too, a view per worker and an entry per queued job), and converted into
messages of a probe schema (below:
per-job placements as maps, per-worker totals carried) that are serialized, compressed, decompressed and parsed.
Timed side by side in one process (CPU of this thread, collector off while timing), with what each form leaves
for the garbage collector: the objects it tracks and one full collection with the state alive.

The probe's schema is compiled at run time (grpc_tools, a development dependency); nothing in the product uses it.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from activities.proto.compressed import compress, decompress
from benchmarks.snapshot import build_state, cpu_ms
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import SchedulerState

PROBE_SCHEMA = """
syntax = "proto3";
package iris_state_probe;
message Value { oneof v { string s = 1; int64 i = 2; double f = 3; bool b = 4; } }
message Worker {
  string session = 1; int64 cpu_millis = 2; int64 memory_bytes = 3; int32 gpus = 4; int32 tpus = 5;
  map<string, Value> attributes = 6; string runtime = 7; int32 state = 8; bool cordoned = 9; string host = 10;
  string address = 11;
}
message PlacedTask { int32 attempt = 1; int32 worker = 2; double placed_at = 3; }
message PlacedJob {
  int64 cpu_millis = 1; int64 memory_bytes = 2; int32 gpus = 3; int32 tpus = 4; string user = 5; string band = 6;
  bool gang = 7; map<int32, PlacedTask> tasks = 8;
}
message Spec { int64 cpu_millis = 1; int64 memory_bytes = 2; int32 gpus = 3; int32 tpus = 4; string user = 5; }
message QueuedJob { string job_id = 1; Spec spec = 2; map<int32, int32> attempts = 3; double submitted_at = 4;
                    string reason = 5; }
message Used { int64 cpu_millis = 1; int64 memory_bytes = 2; int32 gpus = 3; int32 tpus = 4; }
message State {
  repeated string names = 1;                // worker ids, numbered by position (PlacedTask.worker)
  map<string, Worker> workers = 2;
  repeated QueuedJob queue = 3;             // in its FIFO order (a map has none on the wire)
  map<string, PlacedJob> placed = 4;
  map<string, Used> used = 5;               // per worker, carried: summing every placement costs ~0.5 us each
}
"""


def probe_schema() -> ModuleType:
    """The probe's message classes, compiled into a temporary directory removed once they are imported."""
    with tempfile.TemporaryDirectory(prefix="iris-state-probe-") as tmp:
        out = Path(tmp)
        (out / "iris_state_probe.proto").write_text(PROBE_SCHEMA)
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}", "iris_state_probe.proto"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"state-probe: cannot compile the probe schema (grpcio-tools installed?): {done.stderr}")
        sys.path.insert(0, str(out))
        try:
            return importlib.import_module("iris_state_probe_pb2")
        finally:
            sys.path.remove(str(out))


def to_messages(pb: Any, state: SchedulerState) -> Any:
    """The state as the probe's messages (workers, queue with reasons, placements by job, per-worker totals)."""
    msg = pb.State()
    number = {worker_id: i for i, worker_id in enumerate(state.workers)}
    msg.names.extend(state.workers)
    for worker_id, w in state.workers.items():
        row = msg.workers[worker_id]
        row.session, row.cpu_millis, row.memory_bytes = w.session, w.cpu_millis, w.memory_bytes
        row.gpus, row.tpus = w.gpus, w.tpus
        for key, value in w.attributes.items():
            row.attributes[key].s = str(value)
        row.runtime, row.cordoned, row.host, row.address = w.runtime, w.cordoned, w.host, w.address
    for job_id, entry in state.pending.items():
        q = msg.queue.add(job_id=job_id, submitted_at=entry.submitted_at, reason=state.pending_reasons.get(job_id, ""))
        q.spec.cpu_millis, q.spec.memory_bytes = entry.spec.cpu_millis, entry.spec.memory_bytes
        q.attempts.update(entry.attempts)
    for job_id, tasks in state.placements.jobs.items():
        job = msg.placed[job_id]
        for p in tasks.values():
            job.cpu_millis, job.memory_bytes, job.gpus, job.tpus, job.user, job.band, job.gang = (
                p.cpu_millis, p.memory_bytes, p.gpus, p.tpus, p.user, p.band, p.gang)  # fmt: skip
            t = job.tasks[p.task_index]
            t.attempt, t.worker, t.placed_at = p.attempt, number[p.worker_id], p.placed_at
    for worker_id, (cpu, memory, gpus, tpus) in state.placements.used.items():
        msg.used[worker_id].CopyFrom(pb.Used(cpu_millis=cpu, memory_bytes=memory, gpus=gpus, tpus=tpus))
    return msg


def _held_by_collector(build: Any) -> tuple[int, float]:
    """Objects the collector tracks while `build()`'s result is alive, and one full collection's time then (ms)."""
    gc.collect()
    before = len(gc.get_objects())
    kept = build()
    tracked = len(gc.get_objects()) - before
    started = time.thread_time()
    gc.collect()
    collect_ms = (time.thread_time() - started) * 1000
    del kept
    return tracked, collect_ms


def _hand_over(pb: Any, args: argparse.Namespace) -> tuple[float, bytes, float, float, bytes]:
    """Build the state and hand it over both ways: pack it as today (ms, bytes); serialize, compress (ms, ms, bytes)."""
    state = build_state(args.workers, args.placed, args.pending, args.tasks_per_job)
    print(f"state-probe: {args.workers} workers, {len(state.placements)} placed, {args.pending} queued "
          f"({len(state.pending)} jobs), CPU ms of this thread")  # fmt: skip
    pack_ms, packed = cpu_ms(lambda: pack(state))
    msg = to_messages(pb, state)
    serialize_ms, raw = cpu_ms(msg.SerializeToString)
    compress_ms, blob = cpu_ms(lambda: compress(raw))  # as the product compresses (zstd)
    return pack_ms, packed, serialize_ms, compress_ms, blob


def _totals(parsed: Any) -> dict[str, int]:
    """Every worker's carried cpu total, read (what a pass needs of the placements)."""
    return {k: v.cpu_millis for k, v in parsed.used.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks state-probe", description=__doc__)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--placed", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--tasks-per-job", type=int, default=10)
    args = parser.parse_args(argv)
    if min(args.workers, args.tasks_per_job) < 1 or min(args.placed, args.pending) < 0:
        parser.error("--workers and --tasks-per-job must be >= 1, --placed and --pending >= 0")
    pb = probe_schema()
    pack_ms, packed, serialize_ms, compress_ms, blob = _hand_over(pb, args)
    # What follows is what the next run holds: the loaded state, or the parsed messages (the built state is gone).
    unpack_ms, _ = cpu_ms(lambda: unpack(packed))
    tracked_now, collect_now = _held_by_collector(lambda: unpack(packed))
    decompress_ms, raw_again = cpu_ms(lambda: decompress(blob))
    parse_ms, parsed = cpu_ms(lambda: pb.State.FromString(raw_again))
    used_ms, _ = cpu_ms(functools.partial(_totals, parsed))
    del parsed
    tracked_pb, collect_pb = _held_by_collector(lambda: pb.State.FromString(raw_again))
    _, collect_none = _held_by_collector(lambda: None)

    print(f"  {'':30s} {'today (scheduler_carry)':>26s} {'as messages':>14s} {'ratio':>7s}")
    rows = [
        ("hand over (pack)", pack_ms, serialize_ms + compress_ms),
        ("take over (load)", unpack_ms, decompress_ms + parse_ms),
    ]
    for name, today, probe in rows:
        print(f"  {name:30s} {today:26.1f} {probe:14.1f} {today / max(probe, 1e-3):6.1f}x")
    print(f"  {'carried bytes (compressed)':30s} {len(packed):26,d} {len(blob):14,d}")
    print(f"  {'objects the collector tracks':30s} {tracked_now:26,d} {tracked_pb:14,d}")
    print(f"  {'one full collection, ms':30s} {collect_now:26.1f} {collect_pb:14.1f}   (with neither: "
          f"{collect_none:.1f})")  # fmt: skip
    print(f"  messages: serialize {serialize_ms:.1f}, compress {compress_ms:.1f}, decompress {decompress_ms:.1f}, "
          f"parse {parse_ms:.1f} ms; reading every worker's carried total {used_ms:.1f} ms")  # fmt: skip
    return 0
