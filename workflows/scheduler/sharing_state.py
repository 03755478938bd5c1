"""The scheduler workflow's part in sharing a fleet: settings, accounts, the share snapshot, charging, publishing.

Pure functions of the scheduler's state (no Temporal calls), so they run the same
inside the workflow and in unit tests. The policy itself (bands, demotion, fair
share, victims) is decided by `scheduler.sharing` and `scheduler.preemption` in the
scheduling activity; this module only gives them their input and keeps the books:

- Every placement remembers its user, band, whether it is a gang member, and the
  workflow time it was placed. When its attempt releases the place, the attempt
  is charged once for the time it held the worker (`scheduler.accounting.charge_all`);
  the placement, deleted in the same handler, is what makes a redelivered release
  charge nothing.
- Accounts (balances, usage, the ledger) live in the scheduler's state and are
  carried with it (`CarriedBooks`), so they survive continue-as-new and controller kills.
- What `iris user list` shows is published in the scheduler's memo (`users_memo`),
  read through describe, never by a query per call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb
from activities.proto import plan_batches
from activities.proto.values import set_attr
from scheduler.accounting import DEFAULT_CREDITS, Accounts, Charge, Ledger, Rates, UserAccount, charge_all
from scheduler.teams import Team, Teams
from scheduler.types import Resources
from workflows.scheduler.teams_memo import new_durations, typical_seconds

DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_STARVATION_SECONDS = 1800.0  # `sharing.starvation_after`: a waiting gang has its hosts held back after this
USERS_MEMO = "users"  # the scheduler's memo key of the published user table
DEFAULT_CREDITS_MEMO = "default_credits"  # what a user never seen starts with (published beside the table)
MAX_PUBLISHED_USERS = 2_000  # rows in the memo (~100 bytes each): far below the 2 MB memo limit


@dataclass(frozen=True)
class SharingSettings:
    """The cluster's sharing settings (config `sharing:`), sent by the controller to the scheduler."""

    default_credits: float = DEFAULT_CREDITS
    cpu_core_hour: float = 1.0
    memory_gib_hour: float = 0.0
    gpu_hour: float = 10.0
    tpu_chip_hour: float = 10.0
    half_life_hours: float = 6.0
    preemption_grace_seconds: float = DEFAULT_GRACE_SECONDS
    tpu_chip_hour_spot: float = -1.0  # a TPU chip-hour on spot capacity; < 0: as `tpu_chip_hour`
    starvation_after_seconds: float = DEFAULT_STARVATION_SECONDS
    # Teams (`sharing.teams`, scheduler.teams), one row each: [name, members, quota, borrowing_limit,
    # lending_limit], resources as [cpu_millis, memory_bytes, gpus, tpus], a limit None when absent.
    teams: list[list[Any]] = field(default_factory=list)

    @property
    def rates(self) -> Rates:
        spot = self.tpu_chip_hour_spot if self.tpu_chip_hour_spot >= 0 else None
        return Rates(self.cpu_core_hour, self.memory_gib_hour, self.gpu_hour, self.tpu_chip_hour, spot)

    def team_values(self) -> Teams:
        """The teams as the pure scheduler's value (validated)."""
        return teams_from_rows(self.teams)


def _resources(row: list[int] | None) -> Resources | None:
    return None if row is None else Resources(int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def teams_from_rows(rows: Iterable[list[Any]]) -> Teams:
    """`SharingSettings.teams` rows as `scheduler.teams.Teams`."""
    return Teams(tuple(
        Team(str(name), tuple(members), _resources(quota) or Resources(), _resources(borrow), _resources(lend))
        for name, members, quota, borrow, lend in rows
    ))  # fmt: skip


def fill_teams(share: pb.ShareInput, settings: SharingSettings) -> None:
    """The teams and the starvation threshold into a snapshot's sharing part."""
    share.starvation_seconds = settings.starvation_after_seconds
    for name, members, quota, borrow, lend in settings.teams:
        team = share.teams.add(name=name, members=members)
        for target, row in ((team.quota, quota), (team.borrowing_limit, borrow), (team.lending_limit, lend)):
            if row is not None:
                target.cpu_millis, target.memory_bytes, target.gpus, target.tpus = row


@dataclass
class Hold:
    """A preemptor waiting for its victims: the workers it was planned on and the attempts told to stop.

    While any victim still runs, the preemptor stays out of the passes (it evicts nothing more)
    and its workers stay out for everyone else; once the last victim released its place, the
    next pass places the preemptor first (higher band) on what they freed.
    """

    workers: list[str]
    victims: dict[str, int]  # task workflow id -> attempt told to stop
    since: float  # workflow time; a hold past HOLD_TIMEOUT is dropped (a victim that never answers)

    @property
    def ready(self) -> bool:
        return not self.victims


HOLD_TIMEOUT_EXTRA = 120.0  # seconds past the grace period a hold waits for its victims at most


@dataclass
class CarriedAccounts:
    """The accounts as continue-as-new carries them: the users, and the ledger as columns by position."""

    users: list[UserAccount] = field(default_factory=list)
    charged_tasks: list[str] = field(default_factory=list)
    charged_attempts: list[int] = field(default_factory=list)
    charged_seconds: list[float] = field(default_factory=list)


@dataclass
class CarriedBooks:
    """The books as continue-as-new carries them (workflows/scheduler/scheduler_carry.py)."""

    settings: SharingSettings = field(default_factory=SharingSettings)
    accounts: CarriedAccounts = field(default_factory=CarriedAccounts)
    holds: dict[str, Hold] = field(default_factory=dict)  # preemptor job id -> its hold
    headroom: list[list[Any]] = field(default_factory=list)


@dataclass
class Books:
    """The accounts, the sharing settings and the evictions under way, as the scheduler holds them."""

    settings: SharingSettings = field(default_factory=SharingSettings)
    accounts: Accounts = field(default_factory=Accounts)
    holds: dict[str, Hold] = field(default_factory=dict)  # preemptor job id -> its hold
    # What each scale group can still bring, as the autoscaler last said: rows of
    # [group, slices, hosts_per_slice, [cpu_millis, memory_bytes, gpus, tpus], attributes].
    headroom: list[list[Any]] = field(default_factory=list)
    # How long recently finished attempts ran (seconds), for the queue's estimates; workflow memory only.
    recent: deque[float] = field(default_factory=new_durations, compare=False)

    def __post_init__(self) -> None:
        if self.accounts.default_credits != self.settings.default_credits:
            self.accounts = replace(self.accounts, default_credits=self.settings.default_credits)

    def carried(self) -> CarriedBooks:
        """What continue-as-new carries of the books (the durations are workflow memory only)."""
        charged = self.accounts.ledger.charged
        accounts = CarriedAccounts(
            list(self.accounts.users.values()), [task for task, _ in charged], [attempt for _, attempt in charged],
            list(charged.values()),
        )  # fmt: skip
        return CarriedBooks(self.settings, accounts, self.holds, self.headroom)

    @classmethod
    def from_carried(cls, carried: CarriedBooks) -> Books:
        a = carried.accounts
        keys = zip(a.charged_tasks, a.charged_attempts, strict=True)
        ledger = Ledger(dict(zip(keys, a.charged_seconds, strict=True)))
        accounts = Accounts({u.user: u for u in a.users}, ledger, carried.settings.default_credits)
        return cls(carried.settings, accounts, carried.holds, carried.headroom)

    def evicting(self) -> dict[str, int]:
        """Every attempt told to stop and not released yet: task workflow id -> attempt."""
        return {key: attempt for hold in self.holds.values() for key, attempt in hold.victims.items()}

    def held_workers(self) -> set[str]:
        """Workers kept for preemptors whose victims still run: nobody else is placed there."""
        return {w for hold in self.holds.values() if not hold.ready for w in hold.workers}

    def waiting(self) -> set[str]:
        """Preemptors whose victims still run: left out of the passes."""
        return {job_id for job_id, hold in self.holds.items() if not hold.ready}

    def released(self, key: str, attempt: int) -> bool:
        """A victim's attempt gave its place back; True when that made a hold ready."""
        ready = False
        for hold in self.holds.values():
            if hold.victims.get(key) == attempt:
                del hold.victims[key]
                ready = ready or hold.ready
        return ready

    def expire(self, now: float, pending: Iterable[str]) -> None:
        """Drop holds whose preemptor left the queue (placed, killed) or whose victims never answered."""
        queued = set(pending)
        limit = self.settings.preemption_grace_seconds + HOLD_TIMEOUT_EXTRA
        for job_id in [j for j, h in self.holds.items() if j not in queued or now - h.since > limit]:
            del self.holds[job_id]

    def configure(self, settings: SharingSettings) -> None:
        """New settings from the controller; balances already set are kept, the default applies to new users."""
        self.settings = settings
        self.accounts = replace(self.accounts, default_credits=settings.default_credits)

    def set_credits(self, user: str, amount: float) -> None:
        self.accounts = self.accounts.set_credits(user, amount)

    def charge(self, charges: Iterable[Charge]) -> float:
        """Charge attempts that released their places, exactly once per task id and attempt.

        The placement is the guard across signals: an attempt is charged in the handler that
        deletes its placement, and a redelivered release finds none. The ledger guards inside
        a batch and is emptied after it, so it never grows with the number of attempts run.
        """
        s = self.settings
        accounts, spent = charge_all(self.accounts, charges, rates=s.rates, half_life_hours=s.half_life_hours)
        self.accounts = replace(accounts, ledger=Ledger())
        return spent


def fill_share_header(share: pb.ShareInput, books: Books) -> None:
    """Sharing's part of a snapshot but the running work (the placements' columns): accounts, policy, headroom."""
    s = books.settings
    share.default_credits = s.default_credits
    share.half_life_hours = s.half_life_hours
    share.rates.cpu_core_hour, share.rates.memory_gib_hour = s.cpu_core_hour, s.memory_gib_hour
    share.rates.gpu_hour, share.rates.tpu_chip_hour = s.gpu_hour, s.tpu_chip_hour
    fill_teams(share, s)
    share.typical_task_seconds = typical_seconds(books.recent)
    for account in books.accounts.users.values():
        share.users.add(user=account.user, balance=account.balance, used=account.used,
                        usage=account.usage.value, usage_as_of=account.usage.as_of)  # fmt: skip
    for name, slices, hosts, capacity, attributes in books.headroom:
        room = share.headroom.add(group=name, slices=slices, hosts_per_slice=hosts)
        room.host_capacity.cpu_millis, room.host_capacity.memory_bytes = capacity[0], capacity[1]
        room.host_capacity.gpus, room.host_capacity.tpus = capacity[2], capacity[3]
        for key, value in attributes.items():
            set_attr(room.attributes[key], value)


def take_evictions(books: Books, state: Any, plan: pb.SchedulingPlan, now: float) -> list[tuple[str, int, str]]:
    """Turn a plan's evictions into holds: (task workflow id, attempt, reason) for each attempt to stop.

    The preemptors' own assignments are taken out of the plan (they wait for their victims, with the
    workers they were planned on held for them). `state` is the scheduler's state as it is now: a
    preemptor that left the queue meanwhile evicts nothing, a victim that ended meanwhile is skipped.
    """
    if not plan.evictions:
        return []
    start = plan_batches.held_back_from(plan)  # the preemptors' assignments come last (plan_batches)
    planned: dict[str, set[str]] = {}
    for a in plan.assignments[start:]:
        planned.setdefault(a.job_id, set()).add(a.worker_id)
    del plan.assignments[start:]
    out = []
    for e in plan.evictions:
        if e.preemptor not in state.pending:
            continue  # it left the queue while the pass ran: nobody to evict for
        hold = books.holds.get(e.preemptor)
        if hold is None:
            hold = books.holds[e.preemptor] = Hold(sorted(planned.get(e.preemptor, ())), {}, now)
        for index in e.task_indices:
            key = task_workflow_id(e.job_id, index)
            placement = state.placements.get(key)
            if placement is None:
                continue  # it ended while the pass ran: its place is free already
            hold.victims[key] = placement.attempt
            out.append((key, placement.attempt, f"for {e.preemptor}: {e.reason}"))
        if hold.ready:
            del books.holds[e.preemptor]  # every victim had ended already: the next pass places it
    return out


def release_charge(placement: Any, now: float, ran_seconds: float = -1.0, capacity: str = "") -> Charge:
    """What one released attempt costs: its request for the time its process ran, as its agent measured
    it (`ran_seconds`), or, when nobody measured it (killed, worker lost), from its placement to `now`;
    on `capacity` (its worker's `capacity` attribute: spot is charged at the spot rate)."""
    p = placement
    until = p.placed_at + ran_seconds if ran_seconds >= 0 else max(now, p.placed_at)
    return Charge(p.user, task_workflow_id(p.job_id, p.task_index), p.attempt,
                  Resources(p.cpu_millis, p.memory_bytes, p.gpus, p.tpus), p.placed_at, until, capacity)  # fmt: skip


def users_memo(books: Books, running: Mapping[str, int], pending: Mapping[str, int]) -> list[list[Any]]:
    """The user table the scheduler publishes: [user, credits, used, running tasks, pending jobs] rows.

    Every user with an account, running tasks or pending jobs; sorted by name, capped at
    MAX_PUBLISHED_USERS rows.
    """
    accounts = books.accounts
    names = sorted((set(accounts.users) | set(running) | set(pending)) - {""})
    rows = []
    for name in names[:MAX_PUBLISHED_USERS]:
        account = accounts.account(name)
        rows.append([name, round(account.balance, 6), round(account.used, 6), running.get(name, 0),
                     pending.get(name, 0)])  # fmt: skip
    return rows
