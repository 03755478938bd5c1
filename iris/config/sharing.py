"""The `sharing:` block of the cluster config: credits for unknown users, the rates, the half-life, the grace.

```yaml
sharing:
  default_credits: 1000       # what a user never given credits starts with
  rates:                      # credits per hour a task holds each resource
    cpu_core_hour: 1
    memory_gib_hour: 0
    gpu_hour: 10
    tpu_chip_hour: 10
    tpu_chip_hour_spot: 3     # a TPU chip-hour on spot capacity (default: tpu_chip_hour)
  half_life: 6h               # fair share: usage counts half as much this long after it was spent
  preemption_grace: 30s       # an evicted task's SIGTERM to SIGKILL
  starvation_after: 30m       # a gang waiting this long has the hosts it needs held back from smaller work
  teams:                      # guaranteed quotas (scheduler.teams); a user in no team is in team `default`
    - name: vision
      members: [ana, bo]
      quota: {cpu: 8, memory: 32g, gpus: 0, tpu: 0}   # a missing resource is 0
      borrowing_limit: {cpu: 8}                       # absent: no limit
      lending_limit: {cpu: 4}                         # absent: all of its unused quota
```

Every key is optional; an unknown key is an error naming it (`extra="forbid"`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from iris.config.fields import Bytes, Devices, GroupName, Millicores, Seconds
from scheduler.accounting import DEFAULT_CREDITS
from scheduler.reasons import format_bytes
from scheduler.teams import DEFAULT_TEAM, DIMENSIONS, UNLIMITED
from workflows.scheduler.sharing_state import DEFAULT_GRACE_SECONDS, DEFAULT_STARVATION_SECONDS, SharingSettings

_FROZEN = ConfigDict(extra="forbid", frozen=True)
Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def _positive(value: float) -> float:
    if not value > 0:
        raise ValueError(f"must be > 0, got {value:g}s")
    return value


def _not_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"must be >= 0, got {value:g}s")
    return value


class RatesFile(BaseModel):
    """`sharing.rates`: credits per hour of each resource a task holds."""

    model_config = _FROZEN

    cpu_core_hour: Rate = 1.0
    memory_gib_hour: Rate = 0.0
    gpu_hour: Rate = 10.0
    tpu_chip_hour: Rate = 10.0
    tpu_chip_hour_spot: Rate | None = None


class TeamResourcesFile(BaseModel):
    """A team's quota or limit: `{cpu, memory, gpus, tpu}` (tpu counts chips); a missing resource is 0."""

    model_config = _FROZEN

    cpu: Millicores = 0
    memory: Bytes = 0
    gpus: Devices = 0
    tpu: Devices = 0

    def row(self) -> list[int]:
        return [self.cpu, self.memory, self.gpus, self.tpu]

    def limit_row(self) -> list[int]:
        """As a limit: a resource it does not name is not limited."""
        named = self.model_fields_set
        return [
            value if key in named else UNLIMITED[d]
            for d, (key, value) in enumerate(zip(DIMENSIONS, self.row(), strict=True))
        ]


class TeamFile(BaseModel):
    """One entry of `sharing.teams`."""

    model_config = _FROZEN

    name: GroupName
    members: list[Annotated[str, Field(min_length=1)]] = []
    quota: TeamResourcesFile = TeamResourcesFile()
    borrowing_limit: TeamResourcesFile | None = None
    lending_limit: TeamResourcesFile | None = None

    @model_validator(mode="after")
    def _lends_only_its_quota(self) -> TeamFile:
        """A team lends only its unused quota: a lending limit above the quota is a mistake (Kueue refuses it too)."""
        if self.lending_limit is not None:
            for key in self.lending_limit.model_fields_set:
                lend, own = getattr(self.lending_limit, key), getattr(self.quota, key)
                if lend > own:
                    shown = {"cpu": lambda v: f"{v / 1000:g}", "memory": format_bytes}.get(key, str)
                    raise ValueError(f"lending_limit.{key} is more than the team's quota.{key} "
                                     f"({shown(lend)} > {shown(own)}): a team lends only its unused quota")  # fmt: skip
        return self

    def row(self) -> list[Any]:
        return [self.name, list(self.members), self.quota.row(),
                self.borrowing_limit.limit_row() if self.borrowing_limit is not None else None,
                self.lending_limit.limit_row() if self.lending_limit is not None else None]  # fmt: skip


def _teams(teams: list[TeamFile]) -> list[TeamFile]:
    """Names are unique and not `default` (the team of users in no team, whose quota is zero), and a user is
    in at most one team (the message names both teams)."""
    seen: dict[str, str] = {}
    names: set[str] = set()
    for team in teams:
        if team.name == DEFAULT_TEAM:
            raise ValueError(f"team name {DEFAULT_TEAM!r} is reserved for users in no team (its quota is zero): "
                             "give this team another name")  # fmt: skip
        if team.name in names:
            raise ValueError(f"team {team.name!r} is defined twice")
        names.add(team.name)
        for user in team.members:
            if seen.get(user) == team.name:
                raise ValueError(f"user {user!r} is listed twice in team {team.name!r}")
            if user in seen:
                raise ValueError(f"user {user!r} is a member of both {seen[user]!r} and {team.name!r}")
            seen[user] = team.name
    return teams


assert DIMENSIONS == ("cpu", "memory", "gpus", "tpu")  # the YAML keys are the scheduler's names


class SharingFile(BaseModel):
    """`sharing:`: how a team shares the fleet (see docs/sharing.md)."""

    model_config = _FROZEN

    default_credits: Annotated[float, Field(allow_inf_nan=False)] = DEFAULT_CREDITS
    rates: RatesFile = RatesFile()
    half_life: Annotated[Seconds, AfterValidator(_positive)] = 6 * 3600.0
    preemption_grace: Annotated[Seconds, AfterValidator(_not_negative)] = DEFAULT_GRACE_SECONDS
    starvation_after: Annotated[Seconds, AfterValidator(_positive)] = DEFAULT_STARVATION_SECONDS
    teams: Annotated[list[TeamFile], AfterValidator(_teams)] = []

    def settings(self) -> SharingSettings:
        r = self.rates
        return SharingSettings(
            default_credits=self.default_credits, cpu_core_hour=r.cpu_core_hour, memory_gib_hour=r.memory_gib_hour,
            gpu_hour=r.gpu_hour, tpu_chip_hour=r.tpu_chip_hour, half_life_hours=self.half_life / 3600.0,
            preemption_grace_seconds=self.preemption_grace, starvation_after_seconds=self.starvation_after,
            teams=[team.row() for team in self.teams],
            tpu_chip_hour_spot=-1.0 if r.tpu_chip_hour_spot is None else r.tpu_chip_hour_spot,
        )  # fmt: skip


def sharing_document(settings: SharingSettings) -> dict[str, object]:
    """The settings as the `sharing:` block `SharingFile` reads back (the local cluster writes it)."""
    return {
        "default_credits": settings.default_credits,
        "rates": {
            "cpu_core_hour": settings.cpu_core_hour,
            "memory_gib_hour": settings.memory_gib_hour,
            "gpu_hour": settings.gpu_hour,
            "tpu_chip_hour": settings.tpu_chip_hour,
            **({"tpu_chip_hour_spot": settings.tpu_chip_hour_spot} if settings.tpu_chip_hour_spot >= 0 else {}),
        },
        "half_life": settings.half_life_hours * 3600.0,
        "preemption_grace": settings.preemption_grace_seconds,
        "starvation_after": settings.starvation_after_seconds,
        "teams": [_team_document(row) for row in settings.teams],
    }


def _team_document(row: list[Any]) -> dict[str, object]:
    name, members, quota, borrow, lend = row
    out: dict[str, object] = {"name": name, "members": list(members), "quota": _resources_document(quota)}
    if borrow is not None:
        out["borrowing_limit"] = _resources_document(borrow)
    if lend is not None:
        out["lending_limit"] = _resources_document(lend)
    return out


def _resources_document(row: list[int]) -> dict[str, object]:
    values = {"cpu": f"{row[0]}m", "memory": row[1], "gpus": row[2], "tpu": row[3]}
    return {key: value for d, ((key, value), raw) in enumerate(zip(values.items(), row, strict=True))
            if raw < UNLIMITED[d]}  # fmt: skip
