"""`python -m benchmarks trees`: how long after a parent job ends its children's processes are gone.

A parent job's task submits N children (each a `sleep` whose shell records its pid) from inside the
task, waits until every child runs, then returns when the bench says so. The bench times, from the
moment the parent's function returned: the parent's workflow closing (its sweep included), and every
child's process gone (psutil), plus the sweep activity's own time from the parent's history.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from benchmarks.session import quiet_logging, sigterm_as_interrupt, stop_cluster
from iris.client.iris_client import IrisClient
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from iris.types import JobState, ResourceSpec

CHILD = ResourceSpec(cpu=0.01, memory="16m")
PARENT = ResourceSpec(cpu=0.5, memory="512m")
POLL_SECONDS = 0.02


def parent_task(work: str, children: int) -> float:
    """Submit `children` sleeping children, wait until all run and the bench says go; when it returned."""
    with IrisClient.connect() as client:
        for i in range(children):
            client.submit_command(
                ["sh", "-c", f'echo $$ > "{work}/child-{i}.tmp" && mv "{work}/child-{i}.tmp" "{work}/child-{i}"; '
                 "exec sleep 3600"],
                name=f"child-{i}", resources=CHILD,
            )  # fmt: skip
    while not Path(work, "go").exists():
        time.sleep(POLL_SECONDS)
    ended = time.time()
    Path(work, "ended").write_text(repr(ended))
    return ended


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


async def _history_times(client: IrisClient, job_id: str) -> tuple[float | None, float]:
    """From the parent's history: its kill_descendants activity's time (scheduled to completed), and when
    its workflow closed (unix time)."""
    scheduled: float | None = None
    sweep: float | None = None
    last = 0.0
    async for event in client._async.temporal.get_workflow_handle(job_id).fetch_history_events():
        last = event.event_time.ToDatetime().timestamp()
        if event.activity_task_scheduled_event_attributes.activity_type.name == "kill_descendants":
            scheduled = last
        elif scheduled is not None and sweep is None and event.HasField("activity_task_completed_event_attributes"):
            sweep = last - scheduled
    return sweep, last


def measure(client: IrisClient, work: Path, children: int) -> dict[str, float]:
    """One tree: the figures, in seconds."""
    job = client.submit(parent_task, str(work), children, name="tree-bench", resources=PARENT)
    started = time.monotonic()
    while len([p for p in work.iterdir() if p.name.startswith("child-") and not p.name.endswith(".tmp")]) < children:
        if client.job_status(job.job_id).done:
            raise RuntimeError(f"the parent ended before its children ran: {client.job_status(job.job_id).error}")
        time.sleep(0.2)
    tree_up = time.monotonic() - started
    pids = [int((work / f"child-{i}").read_text()) for i in range(children)]
    (work / "go").write_text("")
    while not (work / "ended").exists():
        time.sleep(POLL_SECONDS)
    ended = float((work / "ended").read_text())
    gone_at: dict[int, float] = {}
    while len(gone_at) < len(pids):
        alive = set(_alive([p for p in pids if p not in gone_at]))
        now = time.time()
        gone_at.update((p, now) for p in pids if p not in gone_at and p not in alive)
        time.sleep(POLL_SECONDS)
    times = sorted(t - ended for t in gone_at.values())
    gone = ended + times[-1]
    client.wait(job.job_id, timeout=120)
    listed = client.list_jobs(limit=children + 10, parent=job.job_id)
    killed = sum(client.wait(j.job_id, timeout=120, raise_on_failure=False).state == JobState.KILLED for j in listed)
    sweep, closed = client._run(_history_times(client, job.job_id))
    return {
        "children": children, "tree_up_s": tree_up, "end_to_parent_closed_s": closed - ended,
        "end_to_all_gone_s": gone - ended, "end_to_first_gone_s": times[0],
        "end_to_half_gone_s": times[len(times) // 2], "sweep_activity_s": sweep if sweep is not None else float("nan"),
        "killed_children": killed,
    }  # fmt: skip


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks trees",
        description="Time from a parent job's end to every process of its tree of children gone.",
    )
    parser.add_argument("--children", type=int, default=100, help="children of the parent (default 100)")
    parser.add_argument("--workers", type=int, default=2, help="local workers the children spread over (default 2)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    quiet_logging()
    home = Path(tempfile.mkdtemp(prefix="iris-bench-trees-"))
    cluster = LocalCluster(home)
    config = parse_config({"local": {"worker_groups": [
        {"name": "cpu", "count": args.workers, "resources": {"cpu": 4, "memory": "16g"}},
    ]}}, "trees bench")  # fmt: skip
    with sigterm_as_interrupt():
        try:
            info = cluster.up(config)
            work = home / "work"
            work.mkdir()
            with IrisClient.connect(info.address, store=info.store_url) as client:
                figures = measure(client, work, args.children)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        finally:
            stop_cluster(cluster, home, created=True)
    print(f"job tree of {figures['children']} children (submitted from the parent's task; up in "
          f"{figures['tree_up_s']:.1f} s)")
    print(f"  parent's function returned -> parent's workflow closed:   {figures['end_to_parent_closed_s']:.2f} s")
    print(f"  parent's function returned -> first / half / every child's process gone: "
          f"{figures['end_to_first_gone_s']:.2f} / {figures['end_to_half_gone_s']:.2f} / "
          f"{figures['end_to_all_gone_s']:.2f} s")
    print(f"  the sweep activity (list + {figures['children']} kill signals):      {figures['sweep_activity_s']:.2f} s")
    print(f"  children listed KILLED: {figures['killed_children']}/{figures['children']}")
    return 0 if figures["killed_children"] == figures["children"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
