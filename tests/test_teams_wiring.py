"""Teams travel whole from the config file to the pass: every hand-written encoder on the way keeps them."""

from __future__ import annotations

import json

import yaml
from temporalio.converter import DataConverter

from activities.contracts.dataclass_json import plan_for, to_plain
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import plan_pass, policy_from_pb, share_from_pb
from iris.config.cluster_file import parse_config
from iris.config.sharing import SharingFile, sharing_document
from scheduler.teams import UNLIMITED, Team, Teams
from scheduler.types import Resources
from tests.test_scheduler_determinism import SPEC_FITS
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.sharing_state import Books, SharingSettings
from workflows.scheduler.snapshot_cache import encode_snapshot

GIB = 1 << 30
CONFIG = """
sharing:
  starvation_after: 45m
  teams:
    - name: vision
      members: [ana, bo]
      quota: {cpu: 8, memory: 32g, tpu: 16}
      borrowing_limit: {cpu: 4}
      lending_limit: {cpu: 2, memory: 8g}
    - name: nlp
      members: [cy]
      quota: {cpu: 0.5}
"""
EXPECTED = Teams((
    Team("vision", ("ana", "bo"), Resources(8000, 32 * GIB, 0, 16), Resources(4000, *UNLIMITED[1:]),
         Resources(2000, 8 * GIB, *UNLIMITED[2:])),
    Team("nlp", ("cy",), Resources(500)),
))  # fmt: skip


def _settings() -> SharingSettings:
    return parse_config(yaml.safe_load(CONFIG), "cluster.yaml").sharing


def test_the_config_gives_the_teams_and_the_starvation_threshold() -> None:
    """Quotas in the config's units become exact values; a limit leaves what it does not name unlimited."""
    settings = _settings()
    assert EXPECTED == settings.team_values()
    assert 45 * 60.0 == settings.starvation_after_seconds
    assert "default" == settings.team_values().team_of("dee")


def test_every_encoder_keeps_the_teams() -> None:
    """Config document, signal payload, carried state, snapshot and the pass's decoding all keep them."""
    settings = _settings()
    assert settings == SharingFile.model_validate(sharing_document(settings)).settings()  # the local cluster's file
    converter = DataConverter.default.payload_converter
    payload = converter.to_payloads([settings])  # the configure_sharing signal
    assert settings == converter.from_payloads(payload, [SharingSettings])[0]
    state = SchedulerState(store_url="memory://teams")
    state.books = Books(settings)
    assert settings == unpack(pack(state)).books.settings  # continue-as-new
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(state, 100.0)))
    share = share_from_pb(snap)
    assert share is not None
    assert EXPECTED == share.teams
    assert 45 * 60.0 == policy_from_pb(snap).starvation_seconds
    dashboard = share_from_pb(snap, places=False)
    assert dashboard is not None and EXPECTED == dashboard.teams


def test_a_row_carried_from_before_teams_still_loads() -> None:
    """Carried settings from before teams (no `teams`, no threshold) load with no teams and the default threshold."""
    old = to_plain(SharingSettings(teams=[["t", [], [1, 2, 0, 0], None, None]], starvation_after_seconds=5.0))
    del old["teams"], old["starvation_after_seconds"]
    assert SharingSettings() == plan_for(SharingSettings)(json.loads(json.dumps(old)))  # type: ignore[misc]


def test_durations_reach_the_snapshot_and_estimates_come_back_in_the_plan() -> None:
    """What the scheduler learned of task durations is in the snapshot; the plan carries the queue's estimates."""
    state = SchedulerState(store_url="memory://teams")
    state.workers["w0"] = WorkerEntry("w0", "s", 1000, 1 << 30, 0, 0, {})
    state.placements["run/task-0"] = Placement("run", 0, 0, "w0", 1000, 1 << 20, 0, 0, user="ana",
                                               band="interactive", placed_at=40.0)  # fmt: skip
    state.pending["queued"] = PendingEntry("queued", SPEC_FITS, {0: 0}, 50.0)
    state.books.recent.extend([60.0, 100.0, 80.0])
    data = encode_snapshot(state, 100.0)
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(data))
    assert 80.0 == snap.share.typical_task_seconds
    plan = pb.SchedulingPlan.FromString(compressed.decompress(plan_pass(data)))
    assert ["queued"] == [e.job_id for e in plan.queue]
    assert 120.0 == plan.queue[0].estimated_start  # the running task (started at 40) ends at 40 + 80
    assert plan.queue[0].basis.startswith("first in the queue, once running work frees what it needs")
