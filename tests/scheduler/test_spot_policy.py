"""`capacity: spot_then_on_demand`: k spot preemptions within the window (or a stockout) hold new slices on-demand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from activities.contracts.dataclass_json import plan_for, to_plain
from scheduler.spot import (
    Capacity,
    CapacityPolicy,
    FallbackRecord,
    SpotFallback,
    choose,
    duration_seconds,
    note_preemption,
    note_stockout,
)

FALLBACK = CapacityPolicy(Capacity.SPOT_THEN_ON_DEMAND, SpotFallback(after_preemptions=2, within_seconds=3600,
                                                                     hold_seconds=7200))  # fmt: skip


def test_k_preemptions_within_the_window_hold_on_demand_then_spot_again() -> None:
    """Two preemptions within 1h: on-demand for 2h with the reason, then spot again."""
    record = FallbackRecord()
    assert Capacity.SPOT == choose(FALLBACK, record, 0.0).capacity
    assert not note_preemption(FALLBACK, record, 100.0)
    assert Capacity.SPOT == choose(FALLBACK, record, 101.0).capacity
    assert note_preemption(FALLBACK, record, 200.0)
    held = choose(FALLBACK, record, 201.0)
    assert (Capacity.ON_DEMAND, "spot fallback: 2 spot slices preempted within 1h") == (held.capacity, held.reason)
    assert Capacity.ON_DEMAND == choose(FALLBACK, record, 200.0 + 7199).capacity
    assert Capacity.SPOT == choose(FALLBACK, record, 200.0 + 7200).capacity
    assert "" == record.reason


def test_preemptions_further_apart_than_the_window_do_not_count() -> None:
    """Preemptions more than `within` apart never add up to the rule."""
    record = FallbackRecord()
    for t in (0.0, 4000.0, 8000.0):
        assert not note_preemption(FALLBACK, record, t)
    assert Capacity.SPOT == choose(FALLBACK, record, 8001.0).capacity


def test_stockout_everywhere_falls_back_at_once() -> None:
    """A spot stockout in every zone: on-demand at once, saying why."""
    record = FallbackRecord()
    assert note_stockout(FALLBACK, record, 10.0, "gcp: no zone has v5litepod-16 capacity")
    choice = choose(FALLBACK, record, 11.0)
    assert Capacity.ON_DEMAND == choice.capacity
    assert "spot stocked out in every zone: gcp: no zone has v5litepod-16 capacity" in choice.reason


def test_plain_spot_and_on_demand_never_switch() -> None:
    """`capacity: spot` stays spot however often it is preempted; on-demand stays on-demand."""
    spot = CapacityPolicy.parse({"spot": True})
    record = FallbackRecord()
    for t in range(5):
        assert not note_preemption(spot, record, float(t))
    assert not note_stockout(spot, record, 6.0, "stockout")
    assert Capacity.SPOT == choose(spot, record, 7.0).capacity
    assert Capacity.ON_DEMAND == choose(CapacityPolicy.parse({}), record, 7.0).capacity


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"capacity": "cheap"}, "capacity: must be one of on_demand, spot, spot_then_on_demand"),
        ({"capacity": "on_demand", "spot": True}, "spot: true contradicts capacity: on_demand"),
        ({"capacity": "spot", "spot_fallback": {}}, "spot_fallback: only with capacity: spot_then_on_demand"),
        ({"capacity": "spot_then_on_demand", "spot_fallback": {"within": "soon"}}, "spot_fallback.within: cannot"),
        ({"capacity": "spot_then_on_demand", "spot_fallback": {"after_preemptions": 0}},
         "spot_fallback.after_preemptions: must be at least 1"),
        ({"capacity": "spot_then_on_demand", "spot_fallback": {"later": "1h"}}, "spot_fallback.later: unknown key"),
    ],
)  # fmt: skip
def test_bad_capacity_settings_name_the_field(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        CapacityPolicy.parse(settings)


def test_parse_defaults_and_durations() -> None:
    """The defaults are 2, 1h, 2h; durations read as people write them; `spot: true` is `capacity: spot`."""
    assert SpotFallback(2, 3600.0, 7200.0) == CapacityPolicy.parse({"capacity": "spot_then_on_demand"}).fallback
    parsed = CapacityPolicy.parse(
        {"capacity": "spot_then_on_demand", "spot_fallback": {"after_preemptions": 3, "within": "30m", "hold": "1h30m"}}
    )
    assert SpotFallback(3, 1800.0, 5400.0) == parsed.fallback
    assert Capacity.SPOT == CapacityPolicy.parse({"spot": True}).kind
    assert 90.0 == duration_seconds("90s", "x") == duration_seconds(90, "x")


def test_a_spot_chip_hour_has_its_own_price() -> None:
    """`tpu_chip_hour_spot` prices TPU chips on spot workers; other capacity (and other resources) as before."""
    from scheduler import Accounts, Charge, Rates, Resources, charge_all

    host = Resources(cpu_millis=8000, tpus=4)
    rates = Rates(cpu_core_hour=1.0, tpu_chip_hour=10.0, tpu_chip_hour_spot=3.0)
    assert (48.0, 20.0, 48.0) == (rates.cost(host, 3600.0), rates.cost(host, 3600.0, "spot"),
                                  Rates().cost(host, 3600.0, "spot"))  # fmt: skip
    accounts, spent = charge_all(Accounts(default_credits=100.0), [
        Charge("ana", "j/task-0", 0, host, 0.0, 3600.0, capacity="spot"),
        Charge("bob", "j/task-1", 0, host, 0.0, 3600.0, capacity="on_demand"),
    ], rates=rates)  # fmt: skip
    assert (68.0, 80.0, 52.0) == (spent, accounts.account("ana").balance, accounts.account("bob").balance)
    with pytest.raises(ValueError, match="tpu_chip_hour_spot"):
        Rates(tpu_chip_hour_spot=-1.0)


def _carried(settings: Any) -> Any:
    """The settings through the continue-as-new carry's codec."""
    from workflows.scheduler.sharing_state import SharingSettings

    return plan_for(SharingSettings)(json.loads(json.dumps(to_plain(settings))))  # type: ignore[misc]


def test_the_spot_rate_is_configured_and_carried() -> None:
    """`sharing.rates.tpu_chip_hour_spot` reaches the scheduler's settings and survives their carry and document."""
    from iris.config.sharing import SharingFile, sharing_document
    from workflows.scheduler.sharing_state import SharingSettings

    settings = SharingFile.model_validate({"rates": {"tpu_chip_hour_spot": 3}}).settings()
    assert 3.0 == settings.rates.tpu_chip_hour_spot
    assert settings == _carried(settings)
    assert settings == SharingFile.model_validate(sharing_document(settings)).settings()
    unset = SharingFile.model_validate({}).settings()
    assert unset.rates.tpu_chip_hour_spot is None
    assert unset == SharingFile.model_validate(sharing_document(unset)).settings()
    old = to_plain(unset)
    del old["tpu_chip_hour_spot"]  # a carry written before the spot rate existed
    assert unset == plan_for(SharingSettings)(json.loads(json.dumps(old)))  # type: ignore[misc]
