"""Generate bench inputs: a realistic mixed fleet, or a deliberately fragmented one.

    python -m benchmarks.scheduler_bench.gen --workers 4000 --tasks 30000 --seed 1 OUT.json
    python -m benchmarks.scheduler_bench.gen --fragmented --workers 400 --seed 1 OUT.json
    python -m benchmarks.scheduler_bench.gen --workers 10000 --tasks 100000 --share 50 OUT.json
    python -m benchmarks.scheduler_bench.gen --workers 10000 --tasks 100000 --multislice 0.5 OUT.json

Mixed fleet: TPU slices of 2-16 hosts (tpu-name, tpu-worker-id, tpu-topology),
CPU pools, GPU hosts, a few tainted hosts (jobs carry explicit NOT_EXISTS
constraints for the taints they do not tolerate, as the spec asks), and a
queue of plain, constrained and coscheduled jobs that oversubscribes the TPU
slices, so backfill and pending paths are exercised.

Multi-slice (`--multislice FRACTION`, on a mixed fleet): that share of the
coscheduled jobs asks for 2-4 slices (`coschedule_num_groups`), the queue
keeping its number of tasks.

Sharing (`--share USERS`, on a mixed fleet): every job gets a user (a few heavy
users submit most jobs) and a band (10% production, 40% interactive, 50%
batch); every tenth user has no credits; about half of the TPU slices run a
whole-slice gang and about half of the other hosts run plain tasks (mostly
batch, some interactive, a few production, started up to six hours ago), so
pending interactive and production work finds eviction candidates.

Fragmented: slices listed big-first and CPU hosts last, plain tasks first in
the queue, then small gangs, then whole-slice gangs. First-fit spoils the big
slices (plain tasks and small gangs land on the first hosts it sees); best fit
keeps them whole, so it places strictly more gangs.
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

GIB = 1 << 30
ZONES = ("us-central2-b", "us-east5-a", "europe-west4-a")
# topology -> hosts per slice
TOPOLOGIES = {
    "v4-16": 2,
    "v5p-16": 2,
    "v4-32": 4,
    "v5e-16": 4,
    "v6e-16": 4,
    "v5e-32": 8,
    "v5p-64": 8,
    "v5e-64": 16,
}
TAINTS = ("taint:maintenance", "taint:preemptible")


def _taint_constraints(rng: random.Random, tolerate_p: float) -> list[dict[str, Any]]:
    """Explicit NOT_EXISTS constraints for the taints a job does not tolerate."""
    return [{"key": t, "op": "NOT_EXISTS"} for t in TAINTS if rng.random() >= tolerate_p]


def generate(workers: int, tasks: int, seed: int) -> dict[str, Any]:
    """Build a mixed fleet of about `workers` hosts and a queue of exactly `tasks` tasks."""
    rng = random.Random(seed)
    fleet: list[dict[str, Any]] = []
    slices: list[tuple[str, str]] = []  # (name, topology)
    tpu_hosts = int(workers * 0.45)
    while len(fleet) < tpu_hosts:
        topology = rng.choice(list(TOPOLOGIES))
        name = f"slice-{len(slices)}"
        slices.append((name, topology))
        zone = rng.choice(ZONES)
        for host in range(TOPOLOGIES[topology]):
            attributes: dict[str, Any] = {
                "tpu-name": name,
                "tpu-worker-id": host,
                "tpu-topology": topology,
                "zone": zone,
            }
            fleet.append(
                {
                    "id": f"{name}-w{host}",
                    "cpu": 112,
                    "memory_bytes": 192 * GIB,
                    "gpus": 0,
                    "tpus": 4,
                    "attributes": attributes,
                }
            )
    while len(fleet) < workers:
        index = len(fleet)
        zone = rng.choice(ZONES)
        if rng.random() < 0.15:
            attributes = {"gpu-type": rng.choice(("a100", "h100")), "zone": zone, "cpu-generation": 3}
            fleet.append(
                {
                    "id": f"gpu-{index}",
                    "cpu": 96,
                    "memory_bytes": 768 * GIB,
                    "gpus": 8,
                    "tpus": 0,
                    "attributes": attributes,
                }
            )
        else:
            cores = rng.choice((16, 32, 64, 96))
            attributes = {
                "pool": "cpu",
                "zone": zone,
                "cpu-generation": rng.choice((2, 3, 4)),
                "local-ssd": rng.random() < 0.5,
                "cpu-ghz": rng.choice((2.2, 2.6, 3.1)),
            }
            fleet.append(
                {
                    "id": f"cpu-{index}",
                    "cpu": cores,
                    "memory_bytes": cores * 4 * GIB,
                    "gpus": 0,
                    "tpus": 0,
                    "attributes": attributes,
                }
            )
    for tainted in rng.sample(fleet, k=max(1, workers // 30)):
        tainted["attributes"][rng.choice(TAINTS)] = True
    rng.shuffle(fleet)  # fleets are not listed in a convenient order

    jobs: list[dict[str, Any]] = []
    remaining = tasks
    while remaining > 0:
        kind = rng.random()
        job: dict[str, Any] = {"id": f"j{len(jobs)}", "gpus": 0, "tpus": 0, "coschedule_group_by": None}
        _, topology = rng.choice(slices) if slices else ("", "v4-16")
        if kind < 0.12 and slices and TOPOLOGIES[topology] <= remaining:
            hosts = TOPOLOGIES[topology]
            job.update(
                replicas=hosts,
                cpu=8,
                memory_bytes=32 * GIB,
                tpus=4,
                coschedule_group_by="tpu-name",
                constraints=[
                    {"key": "tpu-topology", "op": "EQ", "value": topology},
                    *_taint_constraints(rng, 0.0),
                ],
            )
        elif kind < 0.20:
            job.update(
                replicas=rng.choice((1, 1, 2, 4, 8)),
                cpu=rng.choice((8, 16, 32)),
                memory_bytes=rng.choice((64, 128)) * GIB,
                gpus=rng.choice((1, 2, 4, 8)),
                constraints=[
                    {"key": "gpu-type", "op": "EQ", "value": rng.choice(("a100", "h100"))},
                    *_taint_constraints(rng, 0.1),
                ],
            )
        elif kind < 0.45:
            options = [
                {"key": "zone", "op": "EQ", "value": rng.choice(ZONES)},
                {"key": "cpu-generation", "op": "GE", "value": rng.choice((3, 4))},
                {"key": "local-ssd", "op": "EQ", "value": True},
                {"key": "cpu-ghz", "op": "GT", "value": 2.5},
                {"key": "pool", "op": "EQ", "value": "cpu"},
                {"key": "zone", "op": "NE", "value": rng.choice(ZONES)},
            ]
            picked = rng.sample(options, k=rng.choice((1, 2)))
            job.update(
                replicas=rng.choice((1, 2, 4, 8, 16, 32, 64)),
                cpu=rng.choice((0.5, 1, 2, 4)),
                memory_bytes=rng.choice((1, 2, 4, 8)) * GIB,
                constraints=[*picked, *_taint_constraints(rng, 0.1)],
            )
        else:
            job.update(
                replicas=rng.choice((1, 1, 2, 4, 8, 16, 32, 64, 128)),
                cpu=rng.choice((0.5, 1, 2, 4)),
                memory_bytes=rng.choice((1, 2, 4, 8)) * GIB,
                constraints=_taint_constraints(rng, 0.1),
            )
        job["replicas"] = min(job["replicas"], remaining)
        remaining -= job["replicas"]
        jobs.append(job)
    return {"workers": fleet, "jobs": jobs}


def add_multislice(doc: dict[str, Any], fraction: float, seed: int) -> dict[str, Any]:
    """Return a copy whose coscheduled jobs are multi-slice with probability `fraction` (2-4 slices each).

    The queue keeps its number of tasks: plain jobs at its end give up the tasks the wider gangs add.
    """
    rng = random.Random(seed + 11)
    jobs = [dict(job) for job in doc["jobs"]]
    added = 0
    for job in jobs:
        if job.get("coschedule_group_by") and rng.random() < fraction:
            slices = rng.choice((2, 2, 3, 4))
            added += job["replicas"] * (slices - 1)
            job.update(replicas=job["replicas"] * slices, coschedule_num_groups=slices)
    for job in reversed(jobs):
        if added <= 0:
            break
        if not job.get("coschedule_group_by"):
            cut = min(added, job["replicas"])
            job["replicas"] -= cut
            added -= cut
    return {**doc, "jobs": [job for job in jobs if job["replicas"] > 0]}


SHARE_NOW = 1_000_000.0
BANDS = ("production", "interactive", "batch")


def add_sharing(doc: dict[str, Any], users: int, seed: int, running_fraction: float = 0.5) -> dict[str, Any]:
    """Return a copy of a mixed-fleet input with users, bands, credits and running work (see module docstring)."""
    rng = random.Random(seed + 7)
    names = [f"user{i:02d}" for i in range(users)]
    weights = [1 / (i + 1) for i in range(users)]
    jobs = [
        {**job, "user": rng.choices(names, weights)[0], "priority": rng.choices(BANDS, (0.1, 0.4, 0.5))[0]}
        for job in doc["jobs"]
    ]
    accounts = {
        name: {"credits": 0.0 if i % 10 == 9 else round(rng.uniform(10, 1000), 1), "usage": rng.uniform(0, 200)}
        for i, name in enumerate(names)
    }
    slices: dict[str, list[dict[str, Any]]] = {}
    others = []
    for worker in doc["workers"]:
        name = worker["attributes"].get("tpu-name")
        if name is None:
            others.append(worker)
        else:
            slices.setdefault(name, []).append(worker)
    running: list[dict[str, Any]] = []

    def band() -> str:
        return rng.choices(BANDS, (0.1, 0.2, 0.7))[0]

    for name, hosts in slices.items():
        if rng.random() < running_fraction:
            hosts = sorted(hosts, key=lambda w: w["attributes"]["tpu-worker-id"])
            running.append(
                {
                    "id": f"run-{name}",
                    "user": rng.choices(names, weights)[0],
                    "priority": band(),
                    "cpu": 8,
                    "memory_bytes": 32 * GIB,
                    "gpus": 0,
                    "tpus": hosts[0]["tpus"],
                    "coscheduled": True,
                    "tasks": [
                        {"task_index": i, "worker": w["id"], "started_at": SHARE_NOW - rng.uniform(0, 6 * 3600)}
                        for i, w in enumerate(hosts)
                    ],
                }
            )
    current: dict[str, Any] | None = None
    for worker in others:
        if rng.random() >= running_fraction:
            continue
        if current is None or len(current["tasks"]) >= 32:
            cpu = rng.choice((1, 2, 4))
            current = {
                "id": f"run-plain-{len(running)}",
                "user": rng.choices(names, weights)[0],
                "priority": band(),
                "cpu": cpu,
                "memory_bytes": cpu * 2 * GIB,
                "gpus": 0,
                "tpus": 0,
                "coscheduled": False,
                "tasks": [],
            }
            running.append(current)
        for _ in range(max(1, int(worker["cpu"] // current["cpu"]) // 2)):  # half the host
            current["tasks"].append(
                {
                    "task_index": len(current["tasks"]),
                    "worker": worker["id"],
                    "started_at": SHARE_NOW - rng.uniform(0, 6 * 3600),
                }
            )
    return {
        "workers": doc["workers"],
        "jobs": jobs,
        "now": SHARE_NOW,
        "default_credits": 100.0,
        "users": accounts,
        "running": running,
    }


def generate_fragmented(workers: int) -> dict[str, Any]:
    """Build a fleet where first-fit fragments slices and best fit does not (see module docstring)."""
    fleet: list[dict[str, Any]] = []
    big: list[str] = []
    small: list[str] = []
    tpu_hosts = workers // 2
    count = 0
    while len(fleet) < tpu_hosts:
        hosts = 8 if count % 3 == 0 else 2  # big slices first in each run of three
        name = f"slice-{count}"
        (big if hosts == 8 else small).append(name)
        for host in range(hosts):
            fleet.append(
                {
                    "id": f"{name}-w{host}",
                    "cpu": 16,
                    "memory_bytes": 64 * GIB,
                    "gpus": 0,
                    "tpus": 4,
                    "attributes": {
                        "tpu-name": name,
                        "tpu-worker-id": host,
                        "tpu-topology": "v5p-64" if hosts == 8 else "v4-16",
                    },
                }
            )
        count += 1
    cpu_hosts = workers - len(fleet)
    for index in range(cpu_hosts):
        fleet.append(
            {
                "id": f"cpu-{index}",
                "cpu": 16,
                "memory_bytes": 64 * GIB,
                "gpus": 0,
                "tpus": 0,
                "attributes": {"pool": "cpu"},
            }
        )
    jobs: list[dict[str, Any]] = []
    # Plain tasks that exactly fill the CPU hosts (two 8-core tasks per host).
    for index in range(cpu_hosts * 2 // 16):
        jobs.append(
            {
                "id": f"plain-{index}",
                "replicas": 16,
                "cpu": 8,
                "memory_bytes": 8 * GIB,
                "gpus": 0,
                "tpus": 0,
                "constraints": [],
                "coschedule_group_by": None,
            }
        )
    # Small gangs that any slice could host, then whole-slice gangs for the big ones.
    for index in range(len(small)):
        jobs.append(
            {
                "id": f"small-gang-{index}",
                "replicas": 2,
                "cpu": 12,
                "memory_bytes": 16 * GIB,
                "gpus": 0,
                "tpus": 4,
                "constraints": [{"key": "tpu-name", "op": "EXISTS"}],
                "coschedule_group_by": "tpu-name",
            }
        )
    for index in range(len(big)):
        jobs.append(
            {
                "id": f"big-gang-{index}",
                "replicas": 8,
                "cpu": 12,
                "memory_bytes": 16 * GIB,
                "gpus": 0,
                "tpus": 4,
                "constraints": [{"key": "tpu-topology", "op": "EQ", "value": "v5p-64"}],
                "coschedule_group_by": "tpu-name",
            }
        )
    return {"workers": fleet, "jobs": jobs}


def main(argv: list[str] | None = None) -> int:
    """CLI: write a generated bench input."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("output")
    parser.add_argument("--workers", type=int, default=4000)
    parser.add_argument("--tasks", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fragmented", action="store_true")
    parser.add_argument("--share", type=int, default=0, metavar="USERS", help="add users, bands and running work")
    parser.add_argument(
        "--multislice", type=float, default=0.0, metavar="FRACTION", help="make this share of the gangs multi-slice"
    )
    args = parser.parse_args(argv)
    doc = (
        generate_fragmented(args.workers)
        if args.fragmented
        else generate(args.workers, args.tasks, args.seed)
    )
    if args.multislice and not args.fragmented:
        doc = add_multislice(doc, args.multislice, args.seed)
    if args.share and not args.fragmented:
        doc = add_sharing(doc, args.share, args.seed)
    with open(args.output, "w") as handle:
        json.dump(doc, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
