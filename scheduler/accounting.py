"""Credits and usage as pure values: what running tasks cost, charged exactly once, decayed for fair share.

The workflows hold these values durably (in the scheduler workflow's state, carried
through continue-as-new) and call these functions; nothing here reads a clock.

Rates (`Rates`, configurable; the defaults are what a cluster gets unless its
config says otherwise): a task costs, per hour it holds its request,

    cpu_core_hour x cores + memory_gib_hour x GiB + gpu_hour x gpus + tpu_chip_hour x tpu chips

with defaults 1 credit per CPU core-hour, 0 per GiB-hour (memory comes with the
cores), 10 per GPU-hour and 10 per TPU chip-hour; a TPU chip-hour on spot capacity
(a worker whose `capacity` attribute is `spot`) costs `tpu_chip_hour_spot` when set. A task is charged for the time
its attempt held its worker, from start to release, whatever the outcome: a
failed or preempted attempt used the machine too. Credits are floats; a
balance may go below zero (a running task is never stopped for credits). A
user never given credits starts with `DEFAULT_CREDITS` (1,000) unless the
cluster sets its own default.

Exactly once: every charge names its (task id, attempt) and the time the
attempt started and the time charged up to. The `Ledger` remembers, per key,
how many seconds were already charged, so charging the same interval again
(a redelivered release signal, a replayed activity, an accrual followed by the
final charge) adds nothing, and a retry or a preempted task's next attempt is
a new key charged for its own time only.

Fair share reads a user's *decayed usage*: every credit spent counts fully when
spent and half as much `half_life_hours` later (default 6 hours), so a heavy
user from yesterday is not penalised today, while a sweep started an hour ago is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from scheduler.types import Resources

SECONDS_PER_HOUR = 3600.0
GIB = 1 << 30
# What a user never given credits starts with, unless the cluster's config says otherwise: enough for a
# thousand core-hours, so a fresh cluster schedules bands as asked until an operator sets balances.
DEFAULT_CREDITS = 1000.0
SPOT = "spot"  # a worker's `capacity` attribute (scheduler.spot.CAPACITY_ATTRIBUTE) on spot capacity


@dataclass(frozen=True, slots=True)
class Rates:
    """Credits per hour of each resource; all >= 0."""

    cpu_core_hour: float = 1.0
    memory_gib_hour: float = 0.0
    gpu_hour: float = 10.0
    tpu_chip_hour: float = 10.0
    # A TPU chip-hour on spot capacity (a worker whose `capacity` attribute is "spot"); None: `tpu_chip_hour`.
    tpu_chip_hour_spot: float | None = None

    def __post_init__(self) -> None:
        for name in ("cpu_core_hour", "memory_gib_hour", "gpu_hour", "tpu_chip_hour", "tpu_chip_hour_spot"):
            value = getattr(self, name)
            if value is None and name == "tpu_chip_hour_spot":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def per_hour(self, request: Resources, capacity: str = "") -> float:
        """Credits one task with this request costs per hour it runs (on `capacity`: "spot" or anything else)."""
        chip = self.tpu_chip_hour_spot if capacity == SPOT and self.tpu_chip_hour_spot is not None else None
        return (
            self.cpu_core_hour * request.cpu_millis / 1000
            + self.memory_gib_hour * request.memory_bytes / GIB
            + self.gpu_hour * request.gpus
            + (self.tpu_chip_hour if chip is None else chip) * request.tpus
        )

    def cost(self, request: Resources, seconds: float, capacity: str = "") -> float:
        """Credits for holding `request` for `seconds` on `capacity` (negative durations cost nothing)."""
        return self.per_hour(request, capacity) * max(0.0, seconds) / SECONDS_PER_HOUR


DEFAULT_RATES = Rates()


@dataclass(frozen=True, slots=True)
class DecayedUsage:
    """A usage figure that halves every half-life: `value` as of time `as_of` (seconds, the caller's clock)."""

    value: float = 0.0
    as_of: float = 0.0

    def at(self, now: float, half_life_hours: float) -> float:
        """The usage as seen at `now`; a `now` earlier than `as_of` reads the stored value (no growth)."""
        elapsed = now - self.as_of
        if elapsed <= 0 or self.value == 0:
            return self.value
        return self.value * 0.5 ** (elapsed / (half_life_hours * SECONDS_PER_HOUR))

    def add(self, amount: float, now: float, half_life_hours: float) -> DecayedUsage:
        """Decay to `now`, then add `amount` (as_of never goes backwards)."""
        when = max(now, self.as_of)
        return DecayedUsage(self.at(when, half_life_hours) + amount, when)


@dataclass(frozen=True, slots=True)
class UserAccount:
    """One user's durable account: the balance left, credits spent in total, and decayed usage."""

    user: str
    balance: float
    used: float = 0.0
    usage: DecayedUsage = field(default_factory=DecayedUsage)

    @property
    def has_credits(self) -> bool:
        """Whether the user may run in interactive or production (a balance > 0)."""
        return self.balance > 0


@dataclass(frozen=True, slots=True)
class Charge:
    """One charge request: attempt `attempt` of task `task_id` ran with `request` from `started_at` to `until`."""

    user: str
    task_id: str
    attempt: int
    request: Resources
    started_at: float
    until: float
    capacity: str = ""  # the worker's `capacity` attribute ("spot" is charged at the spot rate)


@dataclass(frozen=True, slots=True)
class Ledger:
    """Seconds already charged per (task id, attempt): what makes charging exact once.

    Keep a job's keys while any of its attempts may still be charged (until the
    job ends); `forget_job` drops them afterwards so the ledger stays bounded.
    """

    charged: Mapping[tuple[str, int], float] = field(default_factory=dict)

    def seconds(self, task_id: str, attempt: int) -> float:
        """Seconds already charged for this attempt."""
        return self.charged.get((task_id, attempt), 0.0)

    def forget_job(self, job_id: str) -> Ledger:
        """Drop every key of a finished job (task ids are "<job_id>/task-<i>").

        Not its child jobs' keys: their task ids start with the job's id too ("<job_id>/<child>/task-<i>").
        """
        return Ledger({key: value for key, value in self.charged.items() if key[0].rsplit("/task-", 1)[0] != job_id})


@dataclass(frozen=True, slots=True)
class Accounts:
    """Every user's account plus the ledger, as the scheduler workflow holds them; replaced, never mutated."""

    users: Mapping[str, UserAccount] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)
    default_credits: float = DEFAULT_CREDITS

    def account(self, user: str) -> UserAccount:
        """The user's account; a user never seen starts with `default_credits`."""
        found = self.users.get(user)
        return found if found is not None else UserAccount(user, self.default_credits)

    def set_credits(self, user: str, balance: float) -> Accounts:
        """An operator sets the balance left (usage so far is kept)."""
        if isinstance(balance, bool) or not isinstance(balance, int | float) or not math.isfinite(balance):
            raise ValueError(f"credits must be a finite number, got {balance!r}")
        account = replace(self.account(user), balance=float(balance))
        return replace(self, users={**self.users, user: account})


def charge(
    accounts: Accounts, item: Charge, *, rates: Rates = DEFAULT_RATES, half_life_hours: float = 6.0
) -> tuple[Accounts, float]:
    """Charge the part of `item` not charged before; return the new accounts and the credits charged.

    Idempotent per (task id, attempt, until): the same or an earlier `until`
    charges 0. Usage decays to `item.until` before the amount is added.
    """
    return charge_all(accounts, [item], rates=rates, half_life_hours=half_life_hours)


def charge_all(
    accounts: Accounts, items: Iterable[Charge], *, rates: Rates = DEFAULT_RATES, half_life_hours: float = 6.0
) -> tuple[Accounts, float]:
    """Charge a batch (e.g. every release of one pass) with one copy of the state; same rules as `charge`."""
    users = dict(accounts.users)
    charged = dict(accounts.ledger.charged)
    spent = 0.0
    changed = False
    for item in items:
        key = (item.task_id, item.attempt)
        done = charged.get(key, 0.0)
        total = max(0.0, item.until - item.started_at)
        if total <= done:
            continue
        amount = rates.cost(item.request, total - done, item.capacity)
        found = users.get(item.user)
        account = found if found is not None else UserAccount(item.user, accounts.default_credits)
        users[item.user] = UserAccount(
            account.user,
            account.balance - amount,
            account.used + amount,
            account.usage.add(amount, item.until, half_life_hours),
        )
        charged[key] = total
        spent += amount
        changed = True
    if not changed:
        return accounts, 0.0
    return replace(accounts, users=users, ledger=Ledger(charged)), spent
