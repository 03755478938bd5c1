"""An agent's heartbeat timeout (`iris worker serve --heartbeat-timeout`): validated where it is set, declared at
registration, kept on the worker's entry, and handed to each attempt placed there (docs/configuration.md).

The end-to-end check (a frozen agent's attempt timed out after the configured timeout, as its task workflow's
history records it) is tests/faults/test_fencing.py.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from activities.contracts import DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, heartbeat_timeout_seconds
from activities.contracts.worker_rows import row_from_metadata, validate_metadata
from activities.proto import cluster_pb2 as pb
from tests.support import worker_serve_refusal
from worker_agent.agent import (
    HEARTBEAT_FORWARD_SECONDS,
    HEARTBEAT_SECONDS,
    TASK_HEARTBEAT_FORWARD_SECONDS,
    _Pacing,
    metadata,
)
from worker_agent.agent_config import AgentConfig
from worker_agent.leases.lease_settings import LeaseSettings
from workflows.fleet.worker_workflow import SESSION_HEARTBEAT_TIMEOUT, session_heartbeat_timeout
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import SchedulerState, WorkerEntry


def _meta(timeout: float) -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(worker_id="w1", agent_session="s1", heartbeat_timeout_seconds=timeout)
    meta.capacity.cpu_millis = 1000
    return meta


def test_the_setting_is_refused_out_of_range_naming_the_flag() -> None:
    """2-600 s; below, a loaded host would look dead; the error names the flag and its variable."""
    assert 2.0 == LeaseSettings(heartbeat_timeout=2).heartbeat_timeout
    assert 600.0 == LeaseSettings(heartbeat_timeout=600).heartbeat_timeout
    for bad in (1.9, 0, -1, 601, float("nan")):
        with pytest.raises(ValueError, match=r"--heartbeat-timeout, IRIS_HEARTBEAT_TIMEOUT_SECONDS\): must be at "
                                             r"least 2 and at most 600 seconds"):  # fmt: skip
            LeaseSettings(heartbeat_timeout=bad)


def test_the_lease_beats_at_least_three_times_per_heartbeat_timeout() -> None:
    """A short timeout makes the agent beat more often (3 beats per timeout), as a short lease does; the default
    agent beats as before (every 3 s)."""
    assert 3.0 == LeaseSettings().interval
    assert 2.0 == LeaseSettings(heartbeat_timeout=6).interval
    assert 1.0 == LeaseSettings(seconds=3, heartbeat_timeout=6).interval  # the lease's third is the smaller
    assert 3.0 == LeaseSettings(heartbeat_timeout=600).interval


@pytest.mark.parametrize(
    ("args", "env"), [(["--heartbeat-timeout", "1"], {}), ([], {"IRIS_HEARTBEAT_TIMEOUT_SECONDS": "700"})]
)
def test_worker_serve_refuses_a_bad_heartbeat_timeout(args: list[str], env: dict[str, str], tmp_path: Path) -> None:
    """From the flag or the environment: a usage error naming the flag, before anything is reached."""
    stderr = worker_serve_refusal(args, env, tmp_path)
    assert "heartbeat timeout (--heartbeat-timeout" in stderr, stderr


def test_an_agent_declares_it_and_the_scheduler_keeps_it_through_continue_as_new() -> None:
    """The registration carries it to the worker's entry, which survives the scheduler's continue-as-new."""
    config = AgentConfig(worker_id="w1", store_url="file:///x", cpu_millis=1000, memory_bytes=1 << 30,
                         lease=LeaseSettings(heartbeat_timeout=6))  # fmt: skip
    meta = metadata(config, "s1")
    assert 6.0 == meta.heartbeat_timeout_seconds
    entry = WorkerEntry.of(row_from_metadata(meta))
    assert 6.0 == entry.heartbeat_timeout_seconds
    state = SchedulerState(store_url="file:///x")
    state.workers["w1"] = entry
    assert 6.0 == unpack(pack(state)).workers["w1"].heartbeat_timeout_seconds
    assert 0.0 == row_from_metadata(_meta(0)).heartbeat_timeout_seconds  # an older agent's: none


def test_the_scheduler_refuses_a_registration_out_of_range() -> None:
    """An agent that skipped its own check (or a hand-made registration) is refused, not given a broken timeout."""
    assert "" == validate_metadata(_meta(0))  # an older agent: the default
    assert "" == validate_metadata(_meta(6))
    assert "heartbeat_timeout_seconds 1 is not within 2-600" == validate_metadata(_meta(1))
    assert "heartbeat_timeout_seconds 601 is not within 2-600" == validate_metadata(_meta(601))


def test_workflows_read_the_declared_timeout_or_the_default() -> None:
    """An attempt placed by an older scheduler or on an older agent (0) times out as before, after 10 s; the
    session's timeout is 0.6 of the agent's (6 s by default)."""
    assert DEFAULT_HEARTBEAT_TIMEOUT_SECONDS == heartbeat_timeout_seconds(0) == 10.0
    assert 6.0 == heartbeat_timeout_seconds(6)
    assert 10.0 == heartbeat_timeout_seconds(1)  # out of range: read defensively, as the default
    assert SESSION_HEARTBEAT_TIMEOUT == session_heartbeat_timeout(0) == session_heartbeat_timeout(10)
    assert timedelta(seconds=3.6) == session_heartbeat_timeout(6)
    assert timedelta(seconds=360) == session_heartbeat_timeout(600)


def test_the_agent_paces_its_heartbeats_with_its_timeout() -> None:
    """The SDK forwards beats at the same share of the timeout as by default; the session beats no less often."""
    default = _Pacing.of(DEFAULT_HEARTBEAT_TIMEOUT_SECONDS)
    assert (HEARTBEAT_SECONDS, HEARTBEAT_FORWARD_SECONDS, TASK_HEARTBEAT_FORWARD_SECONDS) == (
        default.session_beat, default.session_forward, default.task_forward
    )  # fmt: skip
    short = _Pacing.of(5)
    assert (0.5, 1.0, 4.0) == (short.session_beat, short.session_forward, short.task_forward)
    long = _Pacing.of(100)
    assert (1.0, 20.0, 80.0) == (long.session_beat, long.session_forward, long.task_forward)
