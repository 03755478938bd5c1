"""Multi-slice gangs from submission to the task: validation, the scheduler's state and snapshot, the task env."""

from __future__ import annotations

import pytest

from activities.proto import cluster_pb2 as pb
from activities.scheduling import decode_snapshot
from iris.client.submission import build_request
from iris.types import CoschedulingConfig, ResourceSpec
from worker_agent.megascale import megascale_env
from workflows.jobs.details import job_request_markdown
from workflows.messages import SchedulingSpec
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import (
    PendingEntry,
    SchedulerState,
    WorkerEntry,
)
from workflows.scheduler.snapshot_cache import encode_snapshot


@pytest.mark.parametrize("num_groups", [0, -1, 1.5, True, "2"])
def test_num_groups_is_checked_at_construction(num_groups: object) -> None:
    """A bad num_groups is one clear error naming the field."""
    with pytest.raises(ValueError, match=r"^coscheduling.num_groups must be an integer >= 1"):
        CoschedulingConfig("tpu-name", num_groups=num_groups)  # type: ignore[arg-type]


def test_replicas_must_split_evenly_over_the_slices() -> None:
    """Without a TPU variant, replicas must be a multiple of num_groups; the request then carries it."""
    with pytest.raises(ValueError, match=r"^resources.replicas must be a multiple of coscheduling.num_groups"):
        build_request(resources=ResourceSpec(replicas=3), coscheduling=CoschedulingConfig("tpu-name", 2))
    req = build_request(resources=ResourceSpec(replicas=4), coscheduling=CoschedulingConfig("tpu-name", 2))
    assert 2 == req.coschedule_num_groups


def test_tpu_replicas_are_the_topology_vm_count_times_the_slices() -> None:
    """A v5e-16 (4 VMs) job over 2 slices needs 8 replicas; 4 is refused naming resources.replicas."""
    two = CoschedulingConfig("tpu-name", 2)
    assert 2 == build_request(resources=ResourceSpec(tpu="v5e-16", replicas=8), coscheduling=two).coschedule_num_groups
    with pytest.raises(ValueError, match=r"^resources.replicas: replicas must be 8 .*4 VMs x 2 slices.*got 4$"):
        build_request(resources=ResourceSpec(tpu="v5e-16", replicas=4), coscheduling=two)


def test_num_groups_reaches_the_scheduling_pass_and_survives_packing() -> None:
    """The queue's num_groups goes into the snapshot the pass decodes, and through continue-as-new packing."""
    state = SchedulerState()
    state.workers["w0"] = WorkerEntry("w0", "s", 1000, 1 << 30, 0, 0, {"tpu-name": "a"}, host="host-a")
    spec = SchedulingSpec(1000, 1 << 30, group_by="tpu-name", num_groups=2)
    state.pending["j"] = PendingEntry("j", spec, dict.fromkeys(range(4), 0), 0.0)
    _, jobs = decode_snapshot(encode_snapshot(state, now=1.0))
    assert [2] == [job.num_groups for job in jobs]
    again = unpack(pack(state))
    assert state == again
    assert 2 == again.pending["j"].spec.num_groups


def test_megascale_env_of_a_task() -> None:
    """Task 5 of 8 over 2 slices is on slice 1; a plain job or a one-slice gang gets no MEGASCALE_*."""
    assert {
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
        "MEGASCALE_COORDINATOR_ADDRESS": "host-0:20001",
    } == megascale_env(2, 5, 8, "host-0:20001")
    assert {} == megascale_env(0, 5, 8, "host-0:20001")
    assert {} == megascale_env(1, 5, 8, "host-0:20001")


def test_the_temporal_ui_says_how_a_multi_slice_job_is_split() -> None:
    """The job's description in the Temporal UI names the slices and the attribute that tells them apart."""
    req = pb.JobRequest(replicas=8, coschedule_group_by="tpu-name", coschedule_num_groups=2)
    req.entrypoint.command.argv.append("true")
    assert "| **Coscheduled** | split evenly over 2 slices, each on one `tpu-name` |" in job_request_markdown(req)
