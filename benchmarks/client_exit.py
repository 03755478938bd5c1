"""`python -m benchmarks client-exit`: how often a script that submits a job and exits dies at exit.

The Temporal SDK can abort a process whose interpreter finalizes while one of its threads still drops what a
completed call held (iris/exit_grace.py). This runs the script a user would write (connect, submit a callable,
print the job id, close) over and over against one local cluster, alternating the exit as Iris makes it and the
same exit without the grace (`iris.exit_grace.GRACE_SECONDS = 0` in the script), and prints how many runs of
each died by a signal. The rate is low (about 0.3-1.5 % without the grace): hundreds of runs tell the two apart.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.session import quiet_logging, sigterm_as_interrupt, stop_cluster
from iris.local.cluster import LocalCluster

SCRIPT = textwrap.dedent(
    """
    import sys
    import iris.exit_grace
    from iris import IrisClient, ResourceSpec

    if sys.argv[3] == "no-grace":
        iris.exit_grace.GRACE_SECONDS = 0.0

    def square(offset):
        return offset ** 2

    client = IrisClient.connect(sys.argv[1], store=sys.argv[2])
    print(client.submit(square, 3, resources=ResourceSpec(cpu=0.1, memory="64m")).job_id)
    client.close()
    """
)
VARIANTS = ("grace", "no-grace")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks client-exit", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--streams", type=int, default=2, help="scripts run at once (default 2)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.streams < 1:
        parser.error("--minutes must be > 0 and --streams >= 1")
    return args


def run_streams(address: str, store: str, minutes: float, streams: int) -> dict[str, list[str]]:
    """Each variant's outcomes ('' for a clean exit, else how the process died), the variants alternated."""
    outcomes: dict[str, list[str]] = {variant: [] for variant in VARIANTS}
    end = time.monotonic() + minutes * 60
    running: list[tuple[str, subprocess.Popen[bytes]]] = []
    turn = 0
    while time.monotonic() < end or running:
        while time.monotonic() < end and len(running) < streams:
            variant = VARIANTS[turn % len(VARIANTS)]
            turn += 1
            proc = subprocess.Popen([sys.executable, "-c", SCRIPT, address, store, variant],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
            running.append((variant, proc))
        variant, proc = running.pop(0)
        _, err = proc.communicate()
        if proc.returncode < 0:
            outcomes[variant].append(signal.Signals(-proc.returncode).name)
        elif proc.returncode > 0:
            outcomes[variant].append(f"exit {proc.returncode}: {err.decode(errors='replace').strip()[-200:]}")
        else:
            outcomes[variant].append("")
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    home = Path(tempfile.mkdtemp(prefix="iris-bench-exit-"))
    cluster = LocalCluster(home)
    try:
        with sigterm_as_interrupt():
            info = cluster.up()
            outcomes = run_streams(info.address, info.store_url, args.minutes, args.streams)
    except KeyboardInterrupt:
        print("interrupted; stopping the cluster", file=sys.stderr)
        return 130
    finally:
        stop_cluster(cluster, home, True)
    print(f"client exit: a script that submits a job and exits, {args.streams} at once, variants alternated "
          f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
    for variant in VARIANTS:
        died = [o for o in outcomes[variant] if o]
        kinds = ", ".join(f"{died.count(k)} {k}" for k in sorted(set(died)))
        print(f"  {variant:9s} {len(outcomes[variant]):5d} runs   died {len(died):3d}"
              + (f"  ({kinds})" if kinds else ""))  # fmt: skip
    return 0
