"""The scheduler's state as it continues-as-new, and pending reasons sent only when they change."""

from __future__ import annotations

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import MAX_REASON, cap_reason, encode_plan, known_reasons, share_from_pb, snapshot_from_pb
from scheduler.types import SchedulingResult
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import ConstraintSpec, SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_actions import record
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.snapshot_cache import encode_snapshot

PAYLOAD_LIMIT = 2 * 1024 * 1024


def _fleet(workers: int, jobs: int, tasks_per_job: int, placed_per_worker: int) -> SchedulerState:
    state = SchedulerState(store_url="file:///tmp/store")
    for i in range(workers):
        state.workers[f"host-{i:05d}"] = WorkerEntry(
            f"host-{i:05d}", f"session-{i // 100}", 8000, 32 << 30, 0, 4,
            {"pool": "tpu", "zone": f"zone-{i % 4}", "tpu-worker-id": i % 16, "spot": i % 2 == 0, "gen": 5.5},
        )
    spec = SchedulingSpec(500, 1 << 30, constraints=[ConstraintSpec("pool", "EQ", "tpu")], priority=1)
    for j in range(jobs):
        state.pending[f"job-{j:06d}"] = PendingEntry(f"job-{j:06d}", spec, dict.fromkeys(range(tasks_per_job), 0), 1e9)
        state.pending_reasons[f"job-{j:06d}"] = "0/10000 workers: 10000 have < 0.5 free cpu"
    for i in range(workers * placed_per_worker):
        job_id, worker_id = f"run-{i // 10:06d}", f"host-{i % workers:05d}"
        state.placements[f"{job_id}/task-{i % 10}"] = Placement(job_id, i % 10, 0, worker_id, 500, 1 << 30, 0, 0)
    return state


def test_packed_state_comes_back_whole() -> None:
    """Every field survives the trip, with attribute types (bool, int, float) intact."""
    state = _fleet(workers=20, jobs=5, tasks_per_job=3, placed_per_worker=2)
    state.workers["host-00003"].cordoned = True
    state.workers["host-00004"].state = WorkerState.LOST
    state.workers["host-00004"].lost_at = 12.5
    state.pending["job-000001"].spec.tolerations = ["maintenance"]
    record(state.actions, 11.0, "worker cordoned", "worker", "host-00003", "drain")
    again = unpack(pack(state))
    assert state == again
    assert again.workers["host-00002"].attributes["spot"] is True
    assert isinstance(again.workers["host-00001"].attributes["tpu-worker-id"], int)
    assert {0: 0, 1: 0, 2: 0} == again.pending["job-000000"].attempts
    assert [[11.0, "worker cordoned", "worker", "host-00003", "drain", True]] == list(again.actions)


def test_fleet_scale_state_fits_one_payload() -> None:
    """10,000 workers, 100,000 pending tasks and 100,000 placements continue-as-new well under 2 MB."""
    packed = pack(_fleet(workers=10_000, jobs=10_000, tasks_per_job=10, placed_per_worker=10))
    print(f"packed scheduler state at 10k workers / 100k pending / 100k placed: {len(packed) / 1024:.0f} KiB")
    assert len(packed) < PAYLOAD_LIMIT // 2


def test_plan_carries_only_reasons_that_changed() -> None:
    """A reason the scheduler already holds (by crc32) is left out; a new or changed one is sent, capped."""
    state = _fleet(workers=2, jobs=3, tasks_per_job=1, placed_per_worker=0)
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(state, 1e9 + 5)))
    known = known_reasons(snap)
    long = "x" * (MAX_REASON + 50)
    result = SchedulingResult(
        pending_reasons={
            "job-000000": "0/10000 workers: 10000 have < 0.5 free cpu",  # unchanged
            "job-000001": "0/2 workers: 2 lack pool=gpu",  # changed
            "job-000002": long,
        },
    )
    plan = pb.SchedulingPlan.FromString(compressed.decompress(encode_plan(result, known)))
    assert {"job-000001": "0/2 workers: 2 lack pool=gpu", "job-000002": cap_reason(long)} == dict(plan.pending_reasons)
    assert MAX_REASON == len(plan.pending_reasons["job-000002"])


def test_the_snapshot_holds_the_fleet_the_queue_and_the_running_work() -> None:
    """The pass reads each eligible worker in order with what is free of it, each queued job with its wait, and
    the running tasks where they run; a cordoned worker is left out, and so are the tasks on it."""
    state = _fleet(workers=7, jobs=5, tasks_per_job=2, placed_per_worker=1)
    state.workers["host-00006"].cordoned = True
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(state, 1e9 + 5)))
    workers, jobs = snapshot_from_pb(snap)
    assert [f"host-{i:05d}" for i in range(6)] == [w.worker_id for w in workers]
    assert {(7500, 31 << 30)} == {(w.free.cpu_millis, w.free.memory_bytes) for w in workers}
    assert {"pool": "tpu", "zone": "zone-1", "tpu-worker-id": 1, "spot": False, "gen": 5.5} == workers[1].attributes
    assert [(f"job-{j:06d}", (0, 1), 5.0) for j in range(5)] == [(j.job_id, j.task_indices, j.waited_seconds)
                                                                 for j in jobs]  # fmt: skip
    share = share_from_pb(snap)
    assert share is not None
    running = sorted((t.worker_id, t.task_index) for job in share.running for t in job.tasks)
    assert [(f"host-{i:05d}", i) for i in range(6)] == running
