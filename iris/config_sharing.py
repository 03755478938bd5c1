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
```

Every key is optional; an unknown key is an error naming it (`extra="forbid"`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from iris.config_fields import Seconds
from scheduler.accounting import DEFAULT_CREDITS
from workflows.sharing_state import DEFAULT_GRACE_SECONDS, SharingSettings

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


class SharingFile(BaseModel):
    """`sharing:`: how a team shares the fleet (see docs/sharing.md)."""

    model_config = _FROZEN

    default_credits: Annotated[float, Field(allow_inf_nan=False)] = DEFAULT_CREDITS
    rates: RatesFile = RatesFile()
    half_life: Annotated[Seconds, AfterValidator(_positive)] = 6 * 3600.0
    preemption_grace: Annotated[Seconds, AfterValidator(_not_negative)] = DEFAULT_GRACE_SECONDS

    def settings(self) -> SharingSettings:
        r = self.rates
        return SharingSettings(
            default_credits=self.default_credits, cpu_core_hour=r.cpu_core_hour, memory_gib_hour=r.memory_gib_hour,
            gpu_hour=r.gpu_hour, tpu_chip_hour=r.tpu_chip_hour, half_life_hours=self.half_life / 3600.0,
            preemption_grace_seconds=self.preemption_grace,
            tpu_chip_hour_spot=-1.0 if r.tpu_chip_hour_spot is None else r.tpu_chip_hour_spot,
        )  # fmt: skip


def sharing_document(settings: SharingSettings) -> dict[str, object]:
    """The settings as the `sharing:` block `SharingFile` reads back (the local cluster writes it)."""
    return {
        "default_credits": settings.default_credits,
        "rates": {"cpu_core_hour": settings.cpu_core_hour, "memory_gib_hour": settings.memory_gib_hour,
                  "gpu_hour": settings.gpu_hour, "tpu_chip_hour": settings.tpu_chip_hour,
                  **({"tpu_chip_hour_spot": settings.tpu_chip_hour_spot} if settings.tpu_chip_hour_spot >= 0 else {})},
        "half_life": settings.half_life_hours * 3600.0,
        "preemption_grace": settings.preemption_grace_seconds,
    }
