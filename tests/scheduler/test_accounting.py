"""Credits accounting: rates, exact-once charging per (task, attempt), decayed usage, balances."""

from __future__ import annotations

import pytest
from sched_helpers import GIB

from scheduler import (
    Accounts,
    Charge,
    DecayedUsage,
    Ledger,
    Rates,
    Resources,
    ShareSnapshot,
    UserAccount,
    charge,
    charge_all,
)

HOUR = 3600.0
CORE = Resources(cpu_millis=1000)
TPU_HOST = Resources(cpu_millis=8000, memory_bytes=32 * GIB, tpus=4)


def run(user: str, task: str, attempt: int, start: float, until: float, request: Resources = CORE) -> Charge:
    """A charge for one attempt of one task."""
    return Charge(user, task, attempt, request, start, until)


def test_default_rates_charge_core_hours_and_chip_hours() -> None:
    """One core for an hour costs 1 credit; a 4-chip, 8-core TPU host for half an hour costs 24."""
    assert 1.0 == Rates().cost(CORE, HOUR)
    assert 24.0 == pytest.approx(Rates().cost(TPU_HOST, HOUR / 2))


def test_rates_are_configurable_including_memory() -> None:
    """A per-GiB-hour rate adds memory to the cost; negative durations cost nothing."""
    rates = Rates(cpu_core_hour=0.0, memory_gib_hour=0.5, gpu_hour=0.0, tpu_chip_hour=0.0)
    assert 16.0 == rates.cost(TPU_HOST, HOUR)
    assert 0.0 == rates.cost(TPU_HOST, -5)


def test_a_negative_rate_is_refused_naming_the_field() -> None:
    """Rates validate at construction with the field's name in the error."""
    with pytest.raises(ValueError, match="tpu_chip_hour"):
        Rates(tpu_chip_hour=-1)


def test_the_same_charge_twice_is_charged_once() -> None:
    """A redelivered release (same task, attempt and end) charges nothing the second time."""
    accounts = Accounts(default_credits=10.0)
    accounts, first = charge(accounts, run("ana", "j/task-0", 1, 0, HOUR))
    accounts, second = charge(accounts, run("ana", "j/task-0", 1, 0, HOUR))
    assert (1.0, 0.0) == (first, second)
    assert 9.0 == accounts.account("ana").balance
    assert 1.0 == accounts.account("ana").used


def test_accrual_then_final_charge_adds_up_to_the_whole_run() -> None:
    """Charging a running task part-way and again at its end charges its whole time exactly once."""
    accounts = Accounts(default_credits=10.0)
    accounts, part = charge(accounts, run("ana", "j/task-0", 1, 0, HOUR / 4))
    accounts, late_replay = charge(accounts, run("ana", "j/task-0", 1, 0, HOUR / 8))
    accounts, rest = charge(accounts, run("ana", "j/task-0", 1, 0, HOUR))
    assert (0.25, 0.0, 0.75) == (part, late_replay, rest)
    assert 1.0 == accounts.account("ana").used


def test_a_retry_or_preempted_attempt_is_charged_for_its_own_time() -> None:
    """Attempt 1 (preempted after 30 min) and attempt 2 (ran an hour) cost 1.5 core-hours, not more."""
    accounts = Accounts(default_credits=0.0)
    items = [run("ana", "j/task-0", 1, 0, HOUR / 2), run("ana", "j/task-0", 2, HOUR, 2 * HOUR)]
    accounts, spent = charge_all(accounts, [*items, *items])
    assert 1.5 == spent
    assert -1.5 == accounts.account("ana").balance


def test_charge_all_matches_charging_one_by_one() -> None:
    """A batch of charges leaves the same accounts as applying them one at a time."""
    items = [run(u, f"j{u}/task-{i}", 1, 0, (i + 1) * 600) for u in ("ana", "bob") for i in range(3)]
    batched, _ = charge_all(Accounts(default_credits=5), items)
    single = Accounts(default_credits=5)
    for item in items:
        single, _ = charge(single, item)
    assert single == batched


def test_usage_halves_every_half_life_and_balance_does_not() -> None:
    """Spent credits count half in fair share after one half-life; the balance keeps every credit spent."""
    accounts, _ = charge(Accounts(default_credits=100), run("ana", "j/task-0", 1, 0, 8 * HOUR))
    ana = accounts.account("ana")
    assert 8.0 == ana.usage.at(8 * HOUR, 6.0)
    assert 4.0 == pytest.approx(ana.usage.at(14 * HOUR, 6.0))
    assert 92.0 == ana.balance


def test_decayed_usage_never_grows_backwards_in_time() -> None:
    """Reading or adding at a time before as_of uses the stored value, never inflates it."""
    usage = DecayedUsage(10.0, 100.0)
    assert 10.0 == usage.at(50.0, 1.0)
    assert DecayedUsage(11.0, 100.0) == usage.add(1.0, 50.0, 1.0)


def test_unknown_users_start_with_the_default_and_operators_set_balances() -> None:
    """A user never seen has default_credits; set_credits replaces the balance and keeps usage."""
    accounts = Accounts(default_credits=50.0)
    assert UserAccount("zoe", 50.0) == accounts.account("zoe")
    accounts, _ = charge(accounts, run("zoe", "j/task-0", 1, 0, 2 * HOUR))
    accounts = accounts.set_credits("zoe", 500)
    assert (500.0, 2.0) == (accounts.account("zoe").balance, accounts.account("zoe").used)
    with pytest.raises(ValueError, match="credits"):
        accounts.set_credits("zoe", float("nan"))


def test_a_cluster_without_credit_settings_gives_everyone_a_thousand() -> None:
    """The built-in default lets a fresh cluster schedule bands as asked before any operator sets credits."""
    assert 1000.0 == Accounts().account("new").balance
    assert 1000.0 == ShareSnapshot(now=0.0).balance("new")


def test_forget_job_drops_only_that_jobs_keys() -> None:
    """A finished job's ledger keys go; another job with a longer id that shares the prefix stays."""
    ledger = Ledger({("a/task-0", 1): 5.0, ("a/task-1", 2): 3.0, ("ab/task-0", 1): 1.0})
    assert Ledger({("ab/task-0", 1): 1.0}) == ledger.forget_job("a")
    tree = Ledger({("a/task-0", 0): 1.0, ("a/child-1/task-0", 0): 2.0, ("a/task-9f/task-0", 0): 3.0})
    assert Ledger({("a/child-1/task-0", 0): 2.0, ("a/task-9f/task-0", 0): 3.0}) == tree.forget_job("a")  # children stay


def test_accounts_survive_a_json_round_trip() -> None:
    """What the workflow carries through continue-as-new comes back equal, ledger included."""
    import json

    from activities.contracts.dataclass_json import plan_for, to_plain
    from workflows.scheduler.sharing_state import Books, CarriedBooks, SharingSettings

    accounts, _ = charge(Accounts(default_credits=7.0), run("ana", "j/task-0", 3, 0, HOUR))
    accounts = accounts.set_credits("bob", 5)
    books = Books(SharingSettings(default_credits=7.0), accounts)
    carried = plan_for(CarriedBooks)(json.loads(json.dumps(to_plain(books.carried()))))
    assert accounts == Books.from_carried(carried).accounts
