"""Sharing a fleet: the snapshot part that bands, fair share and preemption need, and the queue order.

The rules (decided here, carried out by the workflows)
------------------------------------------------------
- **Bands.** production > interactive > batch; a job asks for one (default
  interactive). Higher bands are tried first in a pass, and only a higher band
  may evict a strictly lower one (`scheduler.preemption`).
- **Credits.** A user whose balance is <= 0 has every pending job scheduled in
  `batch`, whatever band it asked for; the pass reports the band it used in
  `SchedulingResult.effective_bands` and says so in the pending reason.
  `production` needs credits like interactive does: a production job of a user
  without credits is demoted to batch too, not held and not refused. Holding it
  would leave capacity idle and the user stuck until an operator notices;
  refusing it at submit would need the balance at submit time. Demoted, it
  still runs when there is room, it cannot evict anything, and it may itself be
  evicted; topping up the user's credits restores production at the next pass.
  Running work keeps the band it was placed with (`RunningJob.band`): credits
  running out never stops a task, and a job placed as production is never
  evicted.
- **Fair share.** Inside a band the user with the least *share* goes first,
  then submission order. A user's share is their decayed usage in credits
  (`scheduler.accounting`, half-life `SharePolicy.half_life_hours`, default 6 h)
  plus what their running tasks cost per hour times `running_weight_hours`
  (default 1 h: a running task counts as an hour of use already spent, so a
  sweep that just started counts at once, before any of it is charged). The
  share grows inside the pass with every task placed, so the pass interleaves
  users: after one user's job is placed, the next job tried is the head of the
  queue of whoever now has the least share. One user's 5,000-job sweep
  therefore does not push a colleague's one job to the back.
- **Aging.** A job's place improves with its wait inside its band: the share
  its user is ordered by, as seen by the job at the head of that user's queue,
  halves for every `SharePolicy.aging_hours` (default 1 h) the job has waited,
  at most `aging_max_halvings` times (default 4: a sixteenth). So a job that
  waited 3 h counts its user's share at an eighth. Bounded, so heavy users
  cannot escape fair share for good by queueing early; a user with no usage
  is first anyway, and submission order decides among equals.
- **Backfill** is unchanged: a job that does not fit is skipped and the walk
  goes on, so small jobs start ahead of a big one that waits. A job waiting
  past `starvation_after` (`SchedulingPolicy.starvation_seconds`; the cluster's
  `sharing.starvation_after`, default 30 min) has the workers it needs held
  back from later jobs (`scheduler.placement`) until it starts.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

from scheduler.accounting import DEFAULT_CREDITS, DEFAULT_RATES, Rates, UserAccount
from scheduler.teams import NO_TEAMS, Teams
from scheduler.types import BAND_RANK, Band, Resources, WorkerSnapshot


@dataclass(frozen=True, slots=True)
class SharePolicy:
    """Tunables of sharing; the defaults are what a cluster runs unless its config says otherwise."""

    rates: Rates = DEFAULT_RATES
    half_life_hours: float = 6.0
    running_weight_hours: float = 1.0
    aging_hours: float = 1.0  # a waiting job's user share halves per this many hours it waited...
    aging_max_halvings: int = 4  # ...at most this many times

    def __post_init__(self) -> None:
        if not self.half_life_hours > 0:
            raise ValueError(f"half_life_hours must be > 0, got {self.half_life_hours!r}")
        if not self.running_weight_hours >= 0:
            raise ValueError(f"running_weight_hours must be >= 0, got {self.running_weight_hours!r}")


DEFAULT_SHARE_POLICY = SharePolicy()


class RunningTask(NamedTuple):
    """One running task attempt: where it runs and since when (seconds, the snapshot's clock).

    A named tuple, not a dataclass: a snapshot holds one per running task (tens
    of thousands), and a tuple is built three times faster.
    """

    task_index: int
    worker_id: str
    started_at: float


@dataclass(frozen=True, slots=True)
class RunningJob:
    """The running tasks of one job, with the band they were placed in; candidates for eviction.

    Leave out tasks already being evicted (their capacity stays used in the
    workers' `free` until they release it).
    """

    job_id: str
    user: str
    band: Band
    request: Resources
    tasks: tuple[RunningTask, ...]
    coscheduled: bool = False


@dataclass(frozen=True, slots=True)
class GroupHeadroom:
    """Capacity the autoscaler can still bring for one scale group.

    `hosts` are the workers one new slice of the group registers (empty, with
    their attributes; `scheduler.autoscale.headroom` builds these), and `slices` how many
    such slices may still come: slices booting now plus those the group may add
    below `max_slices` (none while it backs off). A pending job that fits there
    waits for the autoscaler instead of evicting anyone.
    """

    group: str
    hosts: tuple[WorkerSnapshot, ...]
    slices: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """What a pass needs beyond workers and jobs to share the fleet; `now` is the only clock.

    `users` are the accounts as the workflows hold them (a user not listed has
    `default_credits` and no usage), `running` the running work that may be
    evicted, `headroom` what the autoscaler can still add, `teams` the teams and
    their quotas (`scheduler.teams`; none: every user shares one pool as before).
    """

    now: float
    users: Mapping[str, UserAccount] = field(default_factory=dict)
    default_credits: float = DEFAULT_CREDITS
    running: Sequence[RunningJob] = ()
    headroom: Sequence[GroupHeadroom] = ()
    policy: SharePolicy = DEFAULT_SHARE_POLICY
    teams: Teams = NO_TEAMS

    def balance(self, user: str) -> float:
        """The user's credits left."""
        account = self.users.get(user)
        return account.balance if account is not None else self.default_credits

    def shares(self) -> dict[str, float]:
        """Every known user's starting share: decayed usage plus running cost x running_weight_hours."""
        policy = self.policy
        out = {
            user: account.usage.at(self.now, policy.half_life_hours) for user, account in self.users.items()
        }
        weight = policy.running_weight_hours
        for job in self.running:
            extra = policy.rates.per_hour(job.request) * weight * len(job.tasks)
            out[job.user] = out.get(job.user, 0.0) + extra
        return out


class Queued(Protocol):
    """What ordering the queue reads of a job: a `PendingJob`, or anything with these (the dashboard's rows)."""

    @property
    def job_id(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def band(self) -> Band: ...
    @property
    def user(self) -> str: ...


Q = TypeVar("Q", bound=Queued)


def effective_band(job: Queued, share: ShareSnapshot) -> Band:
    """The band a pending job is scheduled in: its own, or batch when its user has no credits left."""
    if job.band != Band.BATCH and share.balance(job.user) <= 0:
        return Band.BATCH
    return job.band


class FairQueue(Generic[Q]):
    """Pending jobs in pass order: band, then least share, then submission order; shares grow as jobs place.

    Iterate to get the jobs; after each one, call `placed(user, amount)` with
    the share its placed tasks add (nothing when none was placed).
    """

    def __init__(
        self, jobs: Sequence[Q], bands: Mapping[str, Band], shares: dict[str, float],
        policy: SharePolicy = DEFAULT_SHARE_POLICY,
    ) -> None:  # fmt: skip
        self.shares = shares
        self.bands = bands  # the band each job is tried in (its own, or batch when its user has no credits)
        self.aging_seconds = policy.aging_hours * 3600.0
        self.aging_cap = float(policy.aging_max_halvings)
        self.by_band: dict[int, dict[str, list[tuple[int, Q]]]] = {}
        for position, job in enumerate(jobs):
            rank = BAND_RANK[bands[job.job_id]]
            self.by_band.setdefault(rank, {}).setdefault(job.user, []).append((position, job))

    def placed(self, user: str, amount: float) -> None:
        """Add to a user's share what the tasks just placed will cost."""
        self.shares[user] = self.shares.get(user, 0.0) + amount

    def aged(self, share: float, job: Q) -> float:
        """The share `job` sees its user at: halved per aging period it waited, within the cap."""
        if share <= 0:
            return share
        waited = getattr(job, "waited_seconds", 0.0)  # rows without a wait (the dashboard's) do not age
        if waited <= 0:
            return share
        return float(share * 0.5 ** min(waited / self.aging_seconds, self.aging_cap))

    def __iter__(self) -> Iterator[Q]:
        shares, aged = self.shares, self.aged
        for rank in sorted(self.by_band, reverse=True):
            queues = self.by_band[rank]
            heap = [(aged(shares.get(user, 0.0), queue[0][1]), queue[0][0], user) for user, queue in queues.items()]
            heapq.heapify(heap)
            heads = dict.fromkeys(queues, 0)
            while heap:
                _, _, user = heap[0]
                queue = queues[user]
                head = heads[user]
                yield queue[head][1]
                head += 1
                if head == len(queue):
                    heapq.heappop(heap)
                    continue
                heads[user] = head
                heapq.heapreplace(heap, (aged(shares.get(user, 0.0), queue[head][1]), queue[head][0], user))
