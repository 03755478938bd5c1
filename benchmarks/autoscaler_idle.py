"""`python -m benchmarks autoscaler-idle`: history events per hour of an idle cluster's autoscaler, before and after.

Each side is a local cluster with one `local` scale group and nothing to run, started in its own process
from its own source tree: "after" is this checkout, "before" the same files at `--before REF` (default
`main`, unpacked with `git archive` into a temporary directory). Both sides run at once, so they share
the machine's load. Each settles, then counts the events its autoscaler's runs add to their histories
(continue-as-new included) over `--minutes`, and reports them per hour.

This file is also the child: run by path (`python benchmarks/autoscaler_idle.py --child ...`) with
the side's tree first on PYTHONPATH, it imports Iris from that tree only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
RESULT = "autoscaler-idle result: "  # the child's result line (the cluster prints too)
AUTOSCALER_ID = "iris-autoscaler"  # activities.contracts.AUTOSCALER_WORKFLOW_ID (not imported: the child's tree)


def fleet(min_slices: int) -> dict[str, object]:
    """One small local group; `min_slices` 1 keeps an idle READY slice."""
    return {
        "scale_groups": [{
            "name": "idle", "platform": "local", "hosts_per_slice": 1, "min_slices": min_slices, "max_slices": 2,
            "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "idle"},
        }],
    }  # fmt: skip


async def autoscaler_events(address: str) -> tuple[int, int]:
    """Events in every run of the autoscaler so far, and how many runs."""
    from temporalio.client import Client

    client = await Client.connect(address)
    total = runs = 0
    async for wf in client.list_workflows(f"WorkflowId='{AUTOSCALER_ID}'"):
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        total, runs = total + len(history.events), runs + 1
    return total, runs


def _kill_slice_hosts(home: Path) -> None:
    """The local platform's slice hosts of this cluster (found by their IRIS_HOME), which outlive `down`."""
    import psutil

    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            env = p.environ()
            if env.get("IRIS_HOME") == str(home) and "IRIS_SLICE_ID" in env:
                p.kill()


def child(settle: float, minutes: float, min_slices: int) -> None:
    """One side: start a cluster, settle, count the autoscaler's events over `minutes`; JSON on stdout."""
    from iris.config.cluster_file import parse_config
    from iris.local.cluster import LocalCluster

    home = Path(tempfile.mkdtemp(prefix="iris-bench-idle-"))
    cluster = LocalCluster(home)
    try:
        info = cluster.up(parse_config(fleet(min_slices), "autoscaler-idle bench"))
        time.sleep(settle)
        start, _ = asyncio.run(autoscaler_events(info.address))
        began = time.monotonic()
        time.sleep(minutes * 60)
        end, runs = asyncio.run(autoscaler_events(info.address))
        elapsed = time.monotonic() - began
        print(RESULT + json.dumps({"events": end - start, "seconds": elapsed, "runs": runs, "total": end}), flush=True)
    finally:
        cluster.down()
        _kill_slice_hosts(home)
        shutil.rmtree(home, ignore_errors=True)


def unpack(ref: str, into: Path) -> None:
    """The tracked files of `ref` into `into`."""
    archive = into / "src.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), ref], check=True)
    with tarfile.open(archive) as tar:  # the sources only: links (a checked-in virtualenv link) are left out
        tar.extractall(into, members=[m for m in tar.getmembers() if not m.issym()], filter="data")
    archive.unlink()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks autoscaler-idle", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long each side idles while counted (5)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after start before counting (30)")
    parser.add_argument("--min-slices", type=int, default=0, help="idle READY slices the group keeps (0)")
    parser.add_argument("--before", default="main", help="the git ref of the 'before' side (main)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.settle, args.minutes, args.min_slices)
        return 0
    with tempfile.TemporaryDirectory(prefix="iris-bench-before-") as before:
        try:
            unpack(args.before, Path(before))
        except subprocess.CalledProcessError:
            print(f"--before: {args.before!r} is not a git ref of this checkout", file=sys.stderr)
            return 1
        sides = {"before": Path(before), "after": REPO}
        procs = {}
        for name, tree in sides.items():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
            cmd = [sys.executable, str(HERE), "--child", "--minutes", str(args.minutes),
                   "--settle", str(args.settle), "--min-slices", str(args.min_slices)]  # fmt: skip
            procs[name] = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, text=True)
        results = {}
        for name, proc in procs.items():
            out, _ = proc.communicate()
            if proc.returncode != 0:
                print(f"{name}: the side failed (exit {proc.returncode})", file=sys.stderr)
                return 1
            found = [line[len(RESULT):] for line in out.splitlines() if line.startswith(RESULT)]
            if not found:
                print(f"{name}: the side printed no result", file=sys.stderr)
                return 1
            results[name] = json.loads(found[-1])
    print(f"idle autoscaler, one local group (min_slices {args.min_slices}), {args.minutes:g} min each, "
          f"both at once; before = {args.before}")  # fmt: skip
    for name, r in results.items():
        per_hour = r["events"] * 3600 / r["seconds"]
        print(f"  {name:6}  {r['events']:5d} events in {r['seconds']:.0f} s  = {per_hour:7.0f} events/hour"
              f"  ({r['runs']} runs, {r['total']} events in all)")  # fmt: skip
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.path.pop(0)  # this file's folder: only the side's tree (on PYTHONPATH) may answer imports
    sys.exit(main(sys.argv[1:]))
