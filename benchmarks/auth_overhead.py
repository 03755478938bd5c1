"""Team mode's cost: the public-API throughput run through the Iris API (a user's token) vs straight to Temporal.

One team-mode cluster (the bench fleet plus `auth: tokens`), one user, and the same `measure_public_api`
run (one-task command jobs from 16 threads of one blocking IrisClient, submitted then waited for) in
alternating rounds: unauthenticated (the operator's Temporal address) then authenticated (the Iris API
with the user's token). Each path's median rate is printed with the ratio.

    python -m benchmarks.auth_overhead [--jobs 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks.iris_jobs import BENCH_FLEET, measure_public_api
from benchmarks.session import quiet_logging, stop_cluster
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.auth_overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=float, default=3.0)
    args = parser.parse_args()
    quiet_logging()
    home = Path(tempfile.mkdtemp(prefix="iris-auth-bench-"))
    cluster = LocalCluster(home)
    try:
        info = cluster.up(parse_config({**BENCH_FLEET, "auth": "tokens"}, "auth bench"))
        from iris.auth.bootstrap import ADMIN_TOKEN_FILE
        from iris.client.iris_client import IrisClient

        with IrisClient.connect(info.dashboard_url, token=(home / ADMIN_TOKEN_FILE).read_text().strip()) as admin:
            user_token = admin._run(admin._async.add_user("bench"))  # type: ignore[attr-defined]
        pids = {"bench": os.getpid(), **info.pids}
        rates: dict[str, list[float]] = {"temporal": [], "iris-api": []}
        for round_ in range(args.rounds):
            os.environ.pop("IRIS_TOKEN", None)
            plain = measure_public_api(info.address, info.store_url, args.jobs, pids, settle=args.settle)
            os.environ["IRIS_TOKEN"] = user_token
            authed = measure_public_api(info.dashboard_url, "", args.jobs, pids, settle=args.settle)
            os.environ.pop("IRIS_TOKEN", None)
            rates["temporal"].append(plain.rate)
            rates["iris-api"].append(authed.rate)
            print(f"round {round_ + 1}: unauthenticated {plain.rate:.1f} jobs/s (cpu {plain.cpu}), "
                  f"authenticated {authed.rate:.1f} jobs/s (cpu {authed.cpu})", flush=True)  # fmt: skip
        plain_rate, authed_rate = statistics.median(rates["temporal"]), statistics.median(rates["iris-api"])
        print(f"median: unauthenticated {plain_rate:.1f} jobs/s, authenticated {authed_rate:.1f} jobs/s, "
              f"ratio {authed_rate / plain_rate:.0%}")  # fmt: skip
    finally:
        stop_cluster(cluster, home, created=True)


if __name__ == "__main__":
    main()
