"""`python -m benchmarks heartbeats`: heartbeat calls a running task costs Temporal, with leases and before them.

Counted by the dev server itself (its frontend's `service_requests` for RecordActivityTaskHeartbeat) while
`--tasks` activities run `--seconds` each, with the agent's settings of the time:

- before leases: the agent called the SDK's heartbeat every HEARTBEAT_SECONDS and the SDK forwarded one at
  most every 2 s; run_task's heartbeat timeout was 6 s;
- with leases: the agent's own `AttemptLease` (worker_agent/leases/lease.py) sends a heartbeat itself every lease
  interval (only a heartbeat the server recorded renews the lease, and its answer brings a kill) and hands
  each to the SDK too (the SDK times out an activity whose heartbeat it has not seen for the heartbeat
  timeout), which forwards one at most every TASK_HEARTBEAT_FORWARD_SECONDS; the timeout is today's.

Printed figures, not a test. Neither kind adds history events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from iris.local.cluster import temporal_binary
from iris.local.commands import HOST, free_port
from worker_agent.agent import HEARTBEAT_SECONDS, TASK_HEARTBEAT_FORWARD_SECONDS
from worker_agent.leases.lease import AttemptLease, LeaseSettings
from workflows.tasks.task_workflow import HEARTBEAT_TIMEOUT

RUN_SECONDS = 30.0  # how long each activity runs (set per run: the activities read it)
BEFORE_LEASES_FORWARD_SECONDS = 2.0  # the agent's SDK throttle before leases
BEFORE_LEASES_TIMEOUT = timedelta(seconds=6)  # run_task's heartbeat timeout before leases


@activity.defn(name="sdk_only")
async def sdk_only() -> float:
    """The agent before leases: the SDK's heartbeat every HEARTBEAT_SECONDS. How long it ran (s)."""
    started = time.monotonic()
    while time.monotonic() < started + RUN_SECONDS:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_SECONDS)
    return time.monotonic() - started


@activity.defn(name="leased")
async def leased() -> float:
    """The agent with leases: its AttemptLease beating for the attempt. How long it ran (s)."""
    started = time.monotonic()
    lease = AttemptLease(activity.client(), LeaseSettings(), fenced=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(lease.run(), RUN_SECONDS)
    return time.monotonic() - started


@workflow.defn(name="HeartbeatProbe", sandboxed=False)
class HeartbeatProbe:
    @workflow.run
    async def run(self, kind: str, seconds: float) -> float:
        return await workflow.execute_activity(
            kind, result_type=float, start_to_close_timeout=timedelta(seconds=seconds + 60), task_queue=kind,
            heartbeat_timeout=BEFORE_LEASES_TIMEOUT if kind == "sdk_only" else HEARTBEAT_TIMEOUT,
        )  # fmt: skip


def _heartbeat_calls(metrics_port: int) -> float:
    """RecordActivityTaskHeartbeat calls the server's frontend has answered so far."""
    body = urllib.request.urlopen(f"http://{HOST}:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("service_requests{")
        and 'operation="RecordActivityTaskHeartbeat"' in line
        and 'service_name="frontend"' in line
    )


async def _measure(client: Client, metrics_port: int, kind: str, tasks: int, seconds: float) -> float:
    """Heartbeat calls per second of a running task while `tasks` activities of `kind` run `seconds`.

    Divided by the activities' own running time, not the wall time around them: a loaded machine that starts one
    kind's workflows or activities seconds late must not make that kind look cheaper (CI run 75 counted 0.33
    calls/s before leases, where the agent's settings send 0.5/s: as if over ~30 s of wall time for 20 s of
    running)."""
    before = _heartbeat_calls(metrics_port)
    ran = await asyncio.gather(*(
        client.execute_workflow(HeartbeatProbe.run, args=[kind, seconds], id=f"hb-{kind}-{uuid.uuid4().hex[:8]}",
                                task_queue="heartbeats")
        for _ in range(tasks)
    ))  # fmt: skip
    return (_heartbeat_calls(metrics_port) - before) / sum(ran)


def _start_server(port: int, metrics_port: int, db: Path) -> subprocess.Popen[bytes]:
    """A dev server of its own, with its metrics on `metrics_port`."""
    return subprocess.Popen(
        [str(temporal_binary()), "server", "start-dev", "--ip", HOST, "--port", str(port), "--headless",
         "--metrics-port", str(metrics_port), "--log-level", "error", "--db-filename", str(db)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def _on_own_server(kind: str, forward: float, tasks: int, seconds: float, tmp: str) -> float:
    """Heartbeat calls per task per second of `kind`, on a dev server of its own (its count is its own)."""
    port, metrics_port = free_port(), free_port()
    server = _start_server(port, metrics_port, Path(tmp, f"{kind}.db"))
    try:
        client = None
        for _ in range(150):
            with contextlib.suppress(Exception):
                client = await Client.connect(f"{HOST}:{port}")
                break
            await asyncio.sleep(0.2)
        if client is None:
            raise RuntimeError("the dev server did not answer")
        activity_fn = sdk_only if kind == "sdk_only" else leased
        async with (
            Worker(client, task_queue="heartbeats", workflows=[HeartbeatProbe]),
            Worker(client, task_queue=kind, activities=[activity_fn],
                   max_heartbeat_throttle_interval=timedelta(seconds=forward),
                   default_heartbeat_throttle_interval=timedelta(seconds=forward)),
        ):  # fmt: skip
            return await _measure(client, metrics_port, kind, tasks, seconds)
    finally:
        server.terminate()
        server.wait(timeout=30)


async def run(tasks: int, seconds: float) -> dict[str, float]:
    """Both kinds at once, each on a server of its own: the same figures in half the time."""
    global RUN_SECONDS
    RUN_SECONDS = seconds
    with tempfile.TemporaryDirectory(prefix="iris-heartbeats-") as tmp:
        before, after = await asyncio.gather(
            _on_own_server("sdk_only", BEFORE_LEASES_FORWARD_SECONDS, tasks, seconds, tmp),
            _on_own_server("leased", TASK_HEARTBEAT_FORWARD_SECONDS, tasks, seconds, tmp),
        )
    return {"before_leases_per_task_s": round(before, 3), "with_leases_per_task_s": round(after, 3),
            "ratio": round(after / before, 2) if before else 0.0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks heartbeats", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.seconds <= 0:
        parser.error("--tasks must be >= 1 and --seconds > 0")
    figures = asyncio.run(run(args.tasks, args.seconds))
    print(f"heartbeat calls per running task, {args.tasks} tasks for {args.seconds:.0f} s (the server's count):")
    print(f"  before leases (the SDK's, every {HEARTBEAT_SECONDS:g} s, forwarded at most every "
          f"{BEFORE_LEASES_FORWARD_SECONDS:g} s): {figures['before_leases_per_task_s']:.3f} /s")  # fmt: skip
    print(f"  with leases (the agent's own every {LeaseSettings().interval:g} s, and the SDK's forwarded at most "
          f"every {TASK_HEARTBEAT_FORWARD_SECONDS:g} s): {figures['with_leases_per_task_s']:.3f} /s  "
          f"({figures['ratio']:.2f}x)")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
