"""The fleet page names each slice's capacity (spot or on-demand) and why a spot group is on-demand now."""

from __future__ import annotations

from iris.dashboard.links import TemporalUI
from iris.dashboard.reads import Page
from iris.dashboard.server import PAGES, REFRESH_SECONDS, _environment
from iris.types import SliceState, SliceStatus
from workflows.fleet.autoscaler_state import AutoscalerStatus, GroupStatus


def test_fleet_page_shows_capacity_and_the_fallback() -> None:
    """A spot_then_on_demand group in its on-demand hold: the reason on its row, each slice's capacity."""
    group = GroupStatus(
        name="tpu", platform="gcp", min_slices=0, max_slices=2, slices={"READY": ["tpu-a", "tpu-b"]},
        capacity_policy="spot_then_on_demand", capacity={"tpu-a": "spot", "tpu-b": "on_demand"},
        fallback_reason="2 spot slices preempted within 1h", fallback_until=1_800_000_000.0,
    )  # fmt: skip
    slices = [SliceStatus(s, "tpu", SliceState.READY, (), (), 1_799_990_000.0, "") for s in ("tpu-a", "tpu-b")]
    html = _environment().get_template("fleet.html").render(
        partial=False, pages=PAGES, ui=TemporalUI("http://127.0.0.1:8233"), refresh=REFRESH_SECONDS,
        rendered_at="now", page="fleet", title="Fleet", status=200, autoscaler=AutoscalerStatus(groups=[group]),
        slices=Page(slices, None, 2), chart="", next_url="", first_url="", viewer=None,
    )  # fmt: skip
    assert "spot fallback: 2 spot slices preempted within 1h" in html
    assert '<span class="capacity">spot</span>' in html
    assert '<span class="capacity">on-demand</span>' in html
