"""The scheduling activity: decode a compact snapshot, run the pure scheduler, encode the plan.

The snapshot and plan travel as compressed binary protobuf (activities/proto/compressed.py) so that a
10k-worker, 100k-task pass stays far below Temporal's 2 MB payload limit.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace

from temporalio import activity

import scheduler
from activities.heartbeat import heartbeating_thread
from activities.pass_pool import run_pass
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed, plan_batches
from activities.proto.values import constraint_fields, get_attr
from scheduler.accounting import DecayedUsage, Rates, UserAccount
from scheduler.attributes import split_soft
from scheduler.autoscale import GroupShape, slice_hosts
from scheduler.estimate import MAX_ESTIMATED, Estimate, estimate_starts
from scheduler.placement import DEFAULT_POLICY, SchedulingPolicy
from scheduler.reasons import largest_worker
from scheduler.reservations import Reservation, demand_view
from scheduler.sharing import GroupHeadroom, RunningJob, RunningTask, SharePolicy, ShareSnapshot
from scheduler.teams import NO_TEAMS, Team, Teams
from scheduler.types import DEFAULT_BAND, Band, Constraint, PendingJob, Resources, WorkerSnapshot, parse_band

FIND_ASSIGNMENTS = "find_assignments"
MAX_REASON = 300  # characters of a pending reason that are kept


def resources_from_pb(r: pb.Resources, seen: dict[tuple[int, int, int, int], Resources] | None = None) -> Resources:
    """A resource vector; with `seen`, equal vectors share one value, validated once (a fleet's workers and a
    queue's jobs have a few distinct ones: 30,000 validations took half of a 10,000 x 100,000 snapshot's
    conversion)."""
    if seen is None:
        return Resources(cpu_millis=r.cpu_millis, memory_bytes=r.memory_bytes, gpus=r.gpus, tpus=r.tpus)
    return _shared((r.cpu_millis, r.memory_bytes, r.gpus, r.tpus), seen)


Split = tuple[tuple[Constraint, ...], tuple[Constraint, ...]]


def constraints_from_pb(messages: Iterable[pb.Constraint], seen: dict[tuple[bytes, ...], Split] | None = None) -> Split:
    """A job's constraints as the pass takes them: (hard, soft), `PendingJob.constraints` and `.preferences`.

    With `seen`, jobs with the same constraints share one pair of tuples: built once, and the pass's
    caches (keyed by the tuples' identity) hit for all of them.
    """
    key = tuple(c.SerializeToString() for c in messages) if seen is not None else ()
    found = seen.get(key) if seen is not None else None
    if found is None:
        built = tuple(Constraint.stored(*constraint_fields(c)) for c in messages)
        found = split_soft(built) if any(c.soft for c in built) else (built, ())
        if seen is not None:
            seen[key] = found
    return found


def decode_snapshot(data: bytes) -> tuple[list[WorkerSnapshot], list[PendingJob]]:
    """The fleet and the demand, as the autoscaler sees them (with reservations: `demand_view`)."""
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(data, "snapshot"))
    workers, jobs = snapshot_from_pb(snap)
    if snap.reservations:
        return demand_view(workers, jobs, decode_reservations(snap))
    return workers, jobs


def snapshot_from_pb(snap: pb.SchedulingSnapshot) -> tuple[list[WorkerSnapshot], list[PendingJob]]:
    seen: dict[tuple[int, int, int, int], Resources] = {}
    return fleet_from_pb(snap, seen), jobs_from_pb(snap, seen)


def fleet_from_pb(
    snap: pb.SchedulingSnapshot, resources: dict[tuple[int, int, int, int], Resources] | None = None
) -> list[WorkerSnapshot]:
    """The workers the pass may place on, each with its capacity and what is free of it (its row's capacity less
    what its placements use), in the snapshot's order."""
    fleet = snap.fleet
    seen = {} if resources is None else resources
    workers = []
    columns = zip(fleet.rows, fleet.used_cpu_millis, fleet.used_memory_bytes, fleet.used_gpus, fleet.used_tpus,
                  strict=True)  # fmt: skip
    for data, cpu, memory, gpus, tpus in columns:
        row = pb.WorkerRow.FromString(data)
        capacity = (row.cpu_millis, row.memory_bytes, row.gpus, row.tpus)
        free = (max(0, capacity[0] - cpu), max(0, capacity[1] - memory), max(0, capacity[2] - gpus),
                max(0, capacity[3] - tpus))  # fmt: skip
        workers.append(WorkerSnapshot(
            worker_id=row.worker_id, free=_shared(free, seen), capacity=_shared(capacity, seen),
            attributes={k: v for k, a in row.attributes.items() if (v := get_attr(a)) is not None},
        ))  # fmt: skip
    return workers


def worker_ids(snap: pb.SchedulingSnapshot) -> list[str]:
    """The snapshot's workers' ids, in its order (what running tasks' positions refer to)."""
    return [pb.WorkerRow.FromString(data).worker_id for data in snap.fleet.rows]


def _shared(key: tuple[int, int, int, int], seen: dict[tuple[int, int, int, int], Resources]) -> Resources:
    found = seen.get(key)
    if found is None:
        found = seen[key] = Resources(*key)
    return found


def _task_starts(queue: pb.SchedulingQueue) -> list[int]:
    """Where each queue position's task indices start in `task_indices` (and, last, where they end)."""
    return [0, *itertools.accumulate(queue.task_counts)]


def jobs_from_pb(
    snap: pb.SchedulingSnapshot, resources: dict[tuple[int, int, int, int], Resources] | None = None
) -> list[PendingJob]:
    """The snapshot's pending jobs, in submission order; what a spec says is read once per distinct spec."""
    queue, now = snap.queue, snap.now
    seen: dict[tuple[bytes, ...], Split] = {}
    requests = {} if resources is None else resources
    shared = [
        PendingJob(job_id="", task_indices=(), request=resources_from_pb(spec.request, requests),
                   constraints=(split := constraints_from_pb(spec.constraints, seen))[0], preferences=split[1],
                   group_by=spec.group_by or None, priority=spec.priority,
                   scheduling_timeout_seconds=spec.scheduling_timeout_seconds or None,
                   tolerations=frozenset(spec.tolerations), num_groups=max(1, spec.num_groups), band=_band(spec.band),
                   user=spec.user, max_concurrent=spec.max_concurrent)
        for spec in queue.specs
    ]  # fmt: skip
    # Submission order, not the order the jobs' enqueues reached the scheduler: two jobs submitted a moment apart
    # may enqueue the other way round (their workflows run side by side). Stable: equal times keep their order.
    order = sorted(range(len(queue.job_ids)), key=queue.submitted_at.__getitem__)
    starts = _task_starts(queue)
    indices = list(queue.task_indices)
    ids, specs, submitted, placed, room = queue.job_ids, queue.spec, queue.submitted_at, queue.placed, queue.room_at
    jobs = []
    for at in order:
        s = shared[specs[at]]
        jobs.append(PendingJob(
            job_id=ids[at], task_indices=tuple(indices[starts[at] : starts[at + 1]]), request=s.request,
            constraints=s.constraints, preferences=s.preferences, group_by=s.group_by, priority=s.priority,
            waited_seconds=max(0.0, now - submitted[at]), scheduling_timeout_seconds=s.scheduling_timeout_seconds,
            tolerations=s.tolerations, num_groups=s.num_groups, band=s.band, user=s.user,
            max_concurrent=s.max_concurrent, placed=placed[at],
            room_waited_seconds=max(0.0, now - room[at]) if room[at] else None,
        ))  # fmt: skip
    return jobs


def queued_jobs(snap: pb.SchedulingSnapshot) -> list[pb.SchedulingJob]:
    """Each queued job as one message (its spec's part and its own columns), in the snapshot's order: for a
    reader that shows jobs (the dashboard's queue page), not for the pass."""
    queue = snap.queue
    starts = _task_starts(queue)
    indices = list(queue.task_indices)
    jobs = []
    columns = zip(queue.job_ids, queue.spec, queue.submitted_at, queue.reason_crc, queue.placed, queue.room_at,
                  strict=True)  # fmt: skip
    for at, (job_id, spec, submitted, crc, placed, room) in enumerate(columns):
        job = pb.SchedulingJob(job_id=job_id, task_indices=indices[starts[at] : starts[at + 1]], submitted_at=submitted,
                               reason_crc=crc, placed=placed, room_at=room)  # fmt: skip
        job.MergeFrom(queue.specs[spec])
        jobs.append(job)
    return jobs


def known_reasons(snap: pb.SchedulingSnapshot) -> dict[str, int]:
    """Job id -> crc32 of the pending reason the scheduler holds (jobs without one left out)."""
    queue = snap.queue
    return {job_id: crc for job_id, crc in zip(queue.job_ids, queue.reason_crc, strict=True) if crc}


def decode_reservations(snap: pb.SchedulingSnapshot) -> list[Reservation]:
    """The snapshot's reservations as the pure scheduler's values."""
    return [
        Reservation(
            reservation_id=r.reservation_id,
            job_id=r.job_id,
            entries=tuple(resources_from_pb(e) for e in r.entries),
            constraints=constraints_from_pb(r.constraints)[0],
            tolerations=frozenset(r.tolerations),
            held={h.entry: h.worker_id for h in r.held},
            used={w: resources_from_pb(u) for w, u in r.used.items()},
            waited_seconds=r.waited_seconds,
            held_once=r.held_once,
        )
        for r in snap.reservations
    ]
def _band(name: str) -> Band:
    """A band by name; an empty one (a request from before bands) is the default band."""
    return parse_band(name, "band") if name else DEFAULT_BAND


def share_from_pb(
    snap: pb.SchedulingSnapshot, *, places: bool = True, names: Sequence[str] | None = None
) -> ShareSnapshot | None:
    """Sharing's part of the snapshot, or None when the scheduler sent none (bands in order, no preemption).

    `places=False` (the dashboard, which only orders the queue) leaves out where and since when each
    running task runs: its tasks are counted (shares need that) as placeholders, and the headroom is left out.
    `names`: the snapshot's worker ids in its order, when the caller has them (`worker_ids`).
    """
    if not snap.HasField("share"):
        return None
    share = snap.share
    if not places:
        return ShareSnapshot(now=snap.now, users=_accounts(share), default_credits=share.default_credits,
                             running=running_from_pb(share, None), policy=_policy(share),
                             teams=teams_from_pb(share))  # fmt: skip
    running = running_from_pb(share, worker_ids(snap) if names is None else names)
    room = []
    for h in share.headroom:
        shape = GroupShape(h.group, h.hosts_per_slice, resources_from_pb(h.host_capacity),
                           {k: v for k, a in h.attributes.items() if (v := get_attr(a)) is not None})  # fmt: skip
        room.append(GroupHeadroom(h.group, tuple(slice_hosts(shape, f"{h.group}-new")), h.slices))
    return ShareSnapshot(
        now=snap.now, users=_accounts(share), default_credits=share.default_credits, running=running, headroom=room,
        policy=_policy(share), teams=teams_from_pb(share),
    )  # fmt: skip


def teams_from_pb(share: pb.ShareInput) -> Teams:
    """The snapshot's teams (none: one pool)."""
    if not share.teams:
        return NO_TEAMS
    return Teams(tuple(
        Team(t.name, tuple(t.members), resources_from_pb(t.quota),
             resources_from_pb(t.borrowing_limit) if t.HasField("borrowing_limit") else None,
             resources_from_pb(t.lending_limit) if t.HasField("lending_limit") else None)
        for t in share.teams
    ))  # fmt: skip


def policy_from_pb(snap: pb.SchedulingSnapshot) -> SchedulingPolicy:
    """The pass's policy: the default, with the cluster's starvation threshold when the snapshot has one."""
    seconds = snap.share.starvation_seconds if snap.HasField("share") else 0.0
    return SchedulingPolicy(starvation_seconds=seconds) if seconds > 0 else DEFAULT_POLICY


UNPLACED = RunningTask(-1, "", 0.0)
"""A running task counted without its place (`share_from_pb(places=False)`)."""


def running_from_pb(share: pb.ShareInput, names: Sequence[str] | None) -> list[RunningJob]:
    """The running work the pass may evict or count: each job's tasks on workers in the fleet, read from the
    placement columns (`ShareInput.placed`); tasks on workers outside it and attempts being evicted are left out.

    `names` are the fleet's worker ids in order; None counts each task as a placeholder (`UNPLACED`).
    """
    if not share.placed:
        return []
    store = pb.PlacedState.FromString(share.placed)
    positions = list(share.row_positions)
    evicting = dict(zip(zip(share.evicting_jobs, share.evicting_tasks, strict=True), share.evicting_attempts,
                        strict=True))  # fmt: skip
    seen: dict[tuple[int, int, int, int], Resources] = {}
    running = []
    jobs = store.jobs
    for job_id in store.job_ids:
        first = None
        tasks = []
        for run in jobs[job_id].runs:
            for index, attempt, row, started in zip(run.task_indices, run.attempts, run.workers, run.placed_at,
                                                    strict=True):  # fmt: skip
                if evicting and evicting.get((job_id, index), -1) >= attempt:
                    continue
                if first is None:
                    first = run  # the job's user, band, request and gang are its first run's
                at = positions[row]
                if at >= 0:
                    tasks.append(UNPLACED if names is None else RunningTask(index, names[at], started))
        if first is not None and tasks:
            request = _shared((first.cpu_millis, first.memory_bytes, first.gpus, first.tpus), seen)
            running.append(RunningJob(job_id=job_id, user=first.user, band=_band(first.band), request=request,
                                      tasks=tuple(tasks), coscheduled=first.gang))  # fmt: skip
    return running


def _policy(share: pb.ShareInput) -> SharePolicy:
    r = share.rates
    return SharePolicy(
        rates=Rates(r.cpu_core_hour, r.memory_gib_hour, r.gpu_hour, r.tpu_chip_hour),
        half_life_hours=share.half_life_hours or 6.0,
    )


def _accounts(share: pb.ShareInput) -> dict[str, UserAccount]:
    return {u.user: UserAccount(u.user, u.balance, u.used, DecayedUsage(u.usage, u.usage_as_of)) for u in share.users}


def cap_reason(reason: str) -> str:
    """A pending reason short enough to keep for every job of a 100k-task queue."""
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def reason_crc(reason: str) -> int:
    return zlib.crc32(reason.encode())


def encode_plan(
    result: scheduler.SchedulingResult,
    known: dict[str, int] | None = None,
    asked: dict[str, Band] | None = None,
    queue: Sequence[Estimate] = (),
) -> bytes:
    """The plan, with only the pending reasons that differ from `known` (job id -> crc32 the scheduler holds),
    its evictions, and the effective bands that differ from the band each job asked for (`asked`); its
    assignments in the batches the scheduler announces (plan_batches)."""
    known = known or {}
    plan = pb.SchedulingPlan()
    for e in result.evictions:  # before the assignments: the preemptors' ones are put last
        plan.evictions.add(job_id=e.job_id, task_indices=e.task_indices, band=str(e.band), preemptor=e.preemptor,
                           reason=cap_reason(e.reason))  # fmt: skip
    plan_batches.fill(plan, result.assignments)  # an Assignment is a (job id, task index, worker id) row
    for job_id, index in result.timed_out:
        plan.timed_out.add(job_id=job_id, task_index=index)
    for job_id, reason in result.pending_reasons.items():
        reason = cap_reason(reason)
        if reason_crc(reason) != known.get(job_id, 0):
            plan.pending_reasons[job_id] = reason
    for reservation_id, held in result.reservation_holds.items():
        for entry, worker_id in held:
            plan.reservation_holds.add(reservation_id=reservation_id, entry=entry, worker_id=worker_id)
    for reservation_id, reason in result.reservation_reasons.items():
        plan.reservation_reasons[reservation_id] = cap_reason(reason)
    asked = asked or {}
    for job_id, band in result.effective_bands.items():
        if band != asked.get(job_id, band):
            plan.effective_bands[job_id] = str(band)
    for waiting in queue:
        plan.queue.add(job_id=waiting.job_id, estimated_start=waiting.start or 0.0, basis=cap_reason(waiting.basis))
    return compressed.compress(plan.SerializeToString())


@activity.defn(name=FIND_ASSIGNMENTS)
def find_assignments_activity(snapshot: bytes) -> bytes:
    """Run one scheduling pass; a sync activity so a big pass runs off the event loop.

    Decoding, scheduling and diffing the reasons all happen here, not in the workflow task.
    """
    with heartbeating_thread():
        return run_pass(plan_pass, snapshot)  # a big pass in a process of its own: see activities.pass_pool


def plan_pass(snapshot: bytes) -> bytes:
    """The pass itself, pure CPU: the compressed snapshot in, the compressed plan out."""
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(snapshot, "snapshot"))
    workers, jobs = snapshot_from_pb(snap)
    known = known_reasons(snap)
    reservations = decode_reservations(snap) if snap.reservations else ()
    share = share_from_pb(snap, names=[w.worker_id for w in workers])
    result = scheduler.find_assignments(workers, jobs, reservations=reservations, share=share,
                                        policy=policy_from_pb(snap))  # fmt: skip
    queue = queue_estimates(snap, workers, jobs, share, result)
    return encode_plan(result, known, {job.job_id: job.band for job in jobs}, queue)


def queue_estimates(
    snap: pb.SchedulingSnapshot, workers: Sequence[WorkerSnapshot], jobs: Sequence[PendingJob],
    share: ShareSnapshot | None, result: scheduler.SchedulingResult,
) -> list[Estimate]:  # fmt: skip
    """Positions and estimated starts of the first waiting jobs (scheduler.estimate), from the pass's plan."""
    if not result.queue:
        return []
    by_id = {job.job_id: job for job in jobs}
    placed: dict[str, set[int]] = {}
    requests = []
    for a in result.assignments:
        placed.setdefault(a.job_id, set()).add(a.task_index)
    waiting = []
    for job_id in result.queue[:MAX_ESTIMATED]:
        job = by_id.get(job_id)
        if job is None:
            continue
        done = placed.get(job_id)
        if done:
            job = replace(job, task_indices=tuple(i for i in job.task_indices if i not in done))
        if job.task_indices:
            waiting.append(job)
    free = [0, 0, 0, 0]
    for w in workers:
        free[0] += w.free.cpu_millis
        free[1] += w.free.memory_bytes
        free[2] += w.free.gpus
        free[3] += w.free.tpus
    for job_id, indices in placed.items():
        r = by_id[job_id].request
        n = len(indices)
        free = [free[0] - r.cpu_millis * n, free[1] - r.memory_bytes * n, free[2] - r.gpus * n, free[3] - r.tpus * n]
        requests.extend([(snap.now, r)] * n)
    running = [(t.started_at, job.request) for job in (share.running if share is not None else ()) for t in job.tasks]
    typical = snap.share.typical_task_seconds if snap.HasField("share") else 0.0
    total = Resources(*(max(0, v) for v in free))
    coming = [host for group in share.headroom for host in group.hosts] if share is not None else []
    largest = largest_worker([*workers, *coming])
    return estimate_starts(waiting, total, running + requests, snap.now, typical or None, result.pending_reasons,
                           largest=largest)  # fmt: skip
