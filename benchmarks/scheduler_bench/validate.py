"""Check a bench OUTPUT.json against its INPUT.json: every rule of the bench spec, nothing else assumed.

    python -m benchmarks.scheduler_bench.validate INPUT.json OUTPUT.json

Checks: every assignment names a known job, an existing task index and a known
worker; no task is assigned twice; the sum of requests on a worker never
exceeds its free cpu, memory, gpus or tpus; every hard constraint of the job
holds on the worker (a `"soft": true` one is a preference, not checked;
brute-force evaluation of the reference semantics, independent of the
scheduler's index); a coscheduled job has all of its tasks assigned on
workers sharing one value of `coschedule_group_by`, or none. A multi-slice
job (optional `coschedule_num_groups`: k > 1) has all of its tasks or none, on
k distinct values of the key, task i with the tasks of its slice `i // (n/k)`
(n tasks). Exit status 1 and one line per violation when anything is wrong.

With sharing fields (see `scheduler.bench`): running tasks hold capacity
unless the output evicts them; an evicted coscheduled job loses all of its
tasks; a victim's band is strictly below its preemptor's (the preemptor's
band as asked, or batch when its user has no credits) and never production;
a preemptor has tasks assigned in the same output.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from scheduler.accounting import DEFAULT_CREDITS
from scheduler.attributes import evaluate, values_equal
from scheduler.types import Constraint

_DIMENSIONS = ("cpu", "memory_bytes", "gpus", "tpus")


def _holds(raw: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    """Evaluate one JSON constraint; an ordering op with a non-numeric value never matches."""
    try:
        constraint = Constraint(raw["key"], raw["op"], raw.get("value"))
    except ValueError:
        return False
    return evaluate(constraint, attributes)


def validate(doc_in: Mapping[str, Any], doc_out: Mapping[str, Any]) -> list[str]:
    """Return every violation of the bench rules (empty when the output is valid)."""
    errors: list[str] = []
    workers = {str(w["id"]): w for w in doc_in["workers"]}
    jobs = {str(j["id"]): j for j in doc_in["jobs"]}
    used: dict[str, dict[str, Fraction]] = {}
    seen: set[tuple[str, int]] = set()
    per_job: dict[str, list[tuple[int, str]]] = {}
    if not isinstance(doc_out.get("seconds"), (int, float)):
        errors.append("output has no numeric 'seconds'")
    for number, item in enumerate(doc_out.get("assignments", [])):
        job_id, index, worker_id = str(item.get("job")), item.get("task_index"), str(item.get("worker"))
        job, worker = jobs.get(job_id), workers.get(worker_id)
        if job is None or worker is None:
            errors.append(f"assignment {number}: unknown job {job_id!r} or worker {worker_id!r}")
            continue
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < int(job["replicas"]):
            errors.append(f"assignment {number}: job {job_id} has no task {index!r}")
            continue
        if (job_id, index) in seen:
            errors.append(f"task {job_id}/{index} assigned twice")
            continue
        seen.add((job_id, index))
        per_job.setdefault(job_id, []).append((index, worker_id))
        attributes = worker.get("attributes") or {}
        for raw in job.get("constraints") or []:
            if not raw.get("soft") and not _holds(raw, attributes):
                errors.append(f"task {job_id}/{index} on {worker_id}: constraint {raw} does not hold")
        total = used.setdefault(worker_id, dict.fromkeys(_DIMENSIONS, Fraction(0)))
        for dimension in _DIMENSIONS:
            total[dimension] += Fraction(str(job.get(dimension, 0)))
    errors += _check_evictions(doc_in, doc_out, used, per_job)
    for worker_id, total in used.items():
        worker = workers[worker_id]
        for dimension in _DIMENSIONS:
            if total[dimension] > Fraction(str(worker.get(dimension, 0))):
                errors.append(
                    f"worker {worker_id}: {dimension} over capacity ({float(total[dimension])} > "
                    f"{worker.get(dimension, 0)})"
                )
    for job_id, placed in per_job.items():
        key = jobs[job_id].get("coschedule_group_by")
        if not key:
            continue
        if len(placed) != int(jobs[job_id]["replicas"]):
            errors.append(
                f"coscheduled job {job_id}: {len(placed)} of {jobs[job_id]['replicas']} tasks assigned"
            )
        groups = int(jobs[job_id].get("coschedule_num_groups") or 1)
        if groups > 1:
            errors += _check_slices(job_id, key, groups, int(jobs[job_id]["replicas"]), placed, workers)
            continue
        values = [(workers[w].get("attributes") or {}).get(key) for _, w in placed]
        first = values[0]
        if first is None or not all(v is not None and values_equal(v, first) for v in values):
            errors.append(f"coscheduled job {job_id}: workers do not share one value of {key}: {values}")
    return errors


def _check_slices(
    job_id: str, key: str, groups: int, replicas: int, placed: Sequence[tuple[int, str]], workers: Mapping[str, Any]
) -> list[str]:
    """A multi-slice job: slice s (tasks s*per .. s*per+per-1) on one value of `key`, k distinct values."""
    per = replicas // groups
    slices: dict[int, list[Any]] = {}
    for index, worker_id in placed:
        slices.setdefault(index // per if per else 0, []).append((workers[worker_id].get("attributes") or {}).get(key))
    errors = []
    firsts = []
    for slice_id, values in sorted(slices.items()):
        first = values[0]
        if first is None or not all(v is not None and values_equal(v, first) for v in values):
            errors.append(f"multi-slice job {job_id}: slice {slice_id} does not share one value of {key}: {values}")
        firsts.append(first)
    if len({(type(v).__name__, v) for v in firsts}) != len(firsts) or len(firsts) != groups:
        errors.append(f"multi-slice job {job_id}: slices are not on {groups} distinct values of {key}: {firsts}")
    return errors


_RANK = {"production": 2, "interactive": 1, "batch": 0}


def _band(item: Mapping[str, Any]) -> str:
    return str(item.get("priority", "interactive")).strip().lower()


def _check_evictions(
    doc_in: Mapping[str, Any],
    doc_out: Mapping[str, Any],
    used: dict[str, dict[str, Fraction]],
    per_job: Mapping[str, list[tuple[int, str]]],
) -> list[str]:
    """Charge running tasks that are not evicted to their workers; check every eviction's rules."""
    errors: list[str] = []
    running = {str(r["id"]): r for r in doc_in.get("running") or []}
    jobs = {str(j["id"]): j for j in doc_in["jobs"]}
    accounts = doc_in.get("users") or {}
    default = float(doc_in.get("default_credits", DEFAULT_CREDITS))
    evicted: dict[str, set[int]] = {}
    for number, item in enumerate(doc_out.get("evictions") or []):
        victim, preemptor = running.get(str(item.get("job"))), jobs.get(str(item.get("preemptor")))
        if victim is None or preemptor is None:
            errors.append(
                f"eviction {number}: unknown running job {item.get('job')!r} or job {item.get('preemptor')!r}"
            )
            continue
        indices = set(item.get("task_indices") or [])
        mine = evicted.setdefault(str(victim["id"]), set())
        if mine & indices:
            errors.append(f"eviction {number}: tasks of {victim['id']} evicted twice")
        mine |= indices
        user = str(preemptor.get("user", ""))
        credits = float((accounts.get(user) or {}).get("credits", default))
        band = _band(preemptor) if credits > 0 else "batch"
        if _band(victim) == "production" or _RANK[_band(victim)] >= _RANK[band]:
            errors.append(
                f"eviction {number}: {_band(victim)} job {victim['id']} evicted for {band} job {preemptor['id']}"
            )
        if not per_job.get(str(preemptor["id"])):
            errors.append(f"eviction {number}: preemptor {preemptor['id']} has no task assigned")
    for job_id, run in running.items():
        gone = evicted.get(job_id, set())
        indices = {int(t["task_index"]) for t in run["tasks"]}
        if gone and run.get("coscheduled") and gone != indices:
            errors.append(f"coscheduled running job {job_id}: {len(gone)} of {len(indices)} tasks evicted")
        for task in run["tasks"]:
            if int(task["task_index"]) in gone:
                continue
            total = used.setdefault(str(task["worker"]), dict.fromkeys(_DIMENSIONS, Fraction(0)))
            for dimension in _DIMENSIONS:
                total[dimension] += Fraction(str(run.get(dimension, 0)))
    return errors


def count_placed(doc_in: Mapping[str, Any], doc_out: Mapping[str, Any]) -> tuple[int, int]:
    """Return (tasks assigned, coscheduled jobs placed) of an output."""
    gangs = {str(j["id"]) for j in doc_in["jobs"] if j.get("coschedule_group_by")}
    assignments = doc_out.get("assignments", [])
    placed_gangs = {str(a["job"]) for a in assignments if str(a["job"]) in gangs}
    return len(assignments), len(placed_gangs)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: validate OUTPUT.json against INPUT.json and print a verdict."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m benchmarks.scheduler_bench.validate INPUT.json OUTPUT.json", file=sys.stderr)
        return 2
    with open(args[0]) as handle:
        doc_in = json.load(handle)
    with open(args[1]) as handle:
        doc_out = json.load(handle)
    errors = validate(doc_in, doc_out)
    for error in errors[:50]:
        print(error)
    tasks, gangs = count_placed(doc_in, doc_out)
    verdict = "INVALID" if errors else "valid"
    print(f"{verdict}: {tasks} tasks placed, {gangs} coscheduled jobs placed, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
