"""The local cluster config file (`iris cluster up --config FILE`), declared as pydantic v2 schemas.

Two layers, both declared, neither hand-checked:

- The file schema (`ClusterFile` and its parts) mirrors the YAML: `extra="forbid"`
  everywhere, so an unknown key is an error that names it with a suggestion ("unknown key
  'resourcez'; did you mean 'resources'?"), and each field's type does its own parsing
  (memory strings to bytes, cores to millicores, "5m" to seconds).
- The config the cluster runs on (`ClusterConfig`, `WorkerGroupConfig`, ...) is frozen
  pydantic dataclasses made of the same field types, so a config built in Python (tests,
  `default_config()`) obeys the same rules as one read from a file.

A mistake is one `ValueError` line naming the file and the YAML path of the field
("config.yaml: local.worker_groups[1].count: ..."). A scale group's platform block
(`manual:`, `gcp:`, `coreweave:`) is checked by that platform module's own `Settings`
model when the module is installed, so a typo there is caught at `iris cluster up` too;
`ScaleGroupConfig.extra` keeps the raw mapping the fleet code reads.
"""

from __future__ import annotations

import importlib
from dataclasses import field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic.dataclasses import dataclass

from activities.contracts import RuntimeName
from activities.contracts.fleet import MAX_SLICE_HEARTBEAT_SECONDS, MIN_SLICE_HEARTBEAT_SECONDS, SLICE_HEARTBEAT_SECONDS
from iris.auth.settings import NO_AUTH, AuthField, AuthFile
from iris.config.fields import (
    AtLeastOne,
    AtLeastZero,
    AttributeKey,
    Attributes,
    Bytes,
    Devices,
    FieldError,
    GroupName,
    Image,
    ListOrNone,
    Millicores,
    Seconds,
    int_at_least,
    kind,
    one_line_error,
    parse_duration,
)
from iris.config.fields import Runtime as RuntimeField
from iris.config.sharing import SharingFile
from iris.units import MIN_MEMORY, parse_memory
from workflows.scheduler.sharing_state import SharingSettings

AttributeValue = str | int | float | bool
"""What an attribute may hold: scalars only, so constraints can compare them."""

Runtime = RuntimeName
"""How a worker runs a task (the names live in the shared contract module)."""

MAX_LOCAL_WORKERS = 64
"""Each local worker is a process on this machine; past this, use scale groups (a fleet of other machines)."""

DEFAULT_MAX_SLICES = 1
"""A scale group that does not say how far it may grow grows to one slice: never an unbounded bill."""

DEFAULT_SCAN_INTERVAL_SECONDS = 5.0
"""How often an idle autoscaler looks at the queue when the config does not say (Ray's autoscaler also uses 5 s)."""

DEFAULT_BACKOFF_SECONDS = 10.0
"""A group's first back-off after failed slices when the config does not say (the autoscaler's own
BACKOFF_BASE_SECONDS, workflows/fleet/autoscaler_state.py)."""

DEFAULT_SLICE_HEARTBEAT_TIMEOUT_SECONDS = SLICE_HEARTBEAT_SECONDS
"""How long a slice's long steps go without a heartbeat before they run again on a live controller, when the
config does not say (activities/contracts/fleet.py)."""


class Platform(StrEnum):
    """Where a scale group's slices come from."""

    LOCAL = "local"
    MANUAL = "manual"
    GCP = "gcp"
    COREWEAVE = "coreweave"


def _platform(value: object) -> Platform:
    try:
        return Platform(str(value)) if isinstance(value, str) else Platform(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f"must be one of {', '.join(p.value for p in Platform)}, got {value!r}") from None


def _local_count(value: object) -> object:
    """A local group's count is processes on this machine: at least one, at most MAX_LOCAL_WORKERS."""
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_LOCAL_WORKERS:
        raise ValueError(
            f"{value} local workers would start {value} processes on this machine; at most "
            f"{MAX_LOCAL_WORKERS} (scale_groups run bigger fleets on other machines)"
        )
    return value


PlatformField = Annotated[Platform, BeforeValidator(_platform)]
LocalCount = Annotated[int, int_at_least(1), BeforeValidator(_local_count)]
_FROZEN = ConfigDict(extra="forbid", frozen=True)
_DATACLASS = ConfigDict(extra="forbid")  # frozen is the dataclass decorator's

# ---------------------------------------------------------------------------- what the cluster runs on


@dataclass(frozen=True)
class LocalWorkerSpec:
    """One `iris worker serve` process of the local cluster: its id, capacity and labels."""

    worker_id: str
    cpu_millis: int
    memory_bytes: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict, hash=False)
    runtime: RuntimeField = Runtime.PROCESS
    gpus: int = 0
    tpus: int = 0
    image: str = ""  # the default container image of a docker/containerd worker


@dataclass(frozen=True, config=_DATACLASS)
class WorkerGroupConfig:
    """`count` identical local workers; with `index_attribute`, host i is labelled with i (a fake slice)."""

    name: GroupName
    count: LocalCount
    cpu_millis: AtLeastZero
    memory_bytes: AtLeastZero
    attributes: Attributes = field(default_factory=dict, hash=False)
    index_attribute: AttributeKey | None = None
    runtime: RuntimeField = Runtime.PROCESS
    gpus: Devices = 0
    tpus: Devices = 0
    image: Image = ""  # the default container image of a docker/containerd worker

    def __post_init__(self) -> None:
        if self.index_attribute is not None and self.index_attribute in self.attributes:
            raise FieldError(
                "index_attribute",
                f"{self.index_attribute!r} is also set in attributes; each host's value would be ambiguous",
            )

    def workers(self) -> list[LocalWorkerSpec]:
        """One spec per host, ids `<group>-<i>`; with `index_attribute`, host i gets that attribute = i."""
        specs = []
        for i in range(self.count):
            attributes = dict(self.attributes)
            if self.index_attribute is not None:
                attributes[self.index_attribute] = i
            specs.append(
                LocalWorkerSpec(
                    worker_id=f"{self.name}-{i}", cpu_millis=self.cpu_millis, memory_bytes=self.memory_bytes,
                    attributes=attributes, runtime=self.runtime, gpus=self.gpus, tpus=self.tpus, image=self.image,
                )
            )
        return specs


@dataclass(frozen=True, config=_DATACLASS)
class ScaleGroupConfig:
    """Slices of `hosts_per_slice` identical hosts that the autoscaler creates and deletes on demand."""

    name: GroupName
    platform: PlatformField
    hosts_per_slice: AtLeastOne
    min_slices: AtLeastZero
    max_slices: AtLeastOne
    cpu_millis: AtLeastZero
    memory_bytes: AtLeastZero
    attributes: Attributes = field(default_factory=dict, hash=False)
    scale_up_delay_seconds: Seconds = 0.0
    scale_down_delay_seconds: Seconds = 300.0
    gpus: Devices = 0
    tpus: Devices = 0
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    """The platform's own settings (the mapping under the key named after the platform, e.g. `gcp:`)."""
    runtime: RuntimeField = Runtime.PROCESS
    """How the group's agents run tasks (`iris worker serve --runtime`)."""
    image: Image = ""
    """The default container image of the group's agents (`--default-image`)."""
    buffer_slices: AtLeastZero = 0
    """Idle READY slices kept beyond demand (within max_slices), so new work starts without a slice's boot."""

    def document(self) -> dict[str, Any]:
        """This group as a `scale_groups` entry that `ScaleGroupFile` reads back as the same group (the local
        cluster hands its controller the groups so; a field left out here was silently dropped there)."""
        platform = str(getattr(self.platform, "value", self.platform))
        doc: dict[str, Any] = {
            "name": self.name, "platform": platform, "hosts_per_slice": self.hosts_per_slice,
            "min_slices": self.min_slices, "max_slices": self.max_slices, "buffer_slices": self.buffer_slices,
            "resources": {"cpu": self.cpu_millis / 1000, "memory": self.memory_bytes, "gpus": self.gpus,
                          "tpus": self.tpus},
            "attributes": dict(self.attributes), "scale_up_delay": self.scale_up_delay_seconds,
            "scale_down_delay": self.scale_down_delay_seconds,
            "runtime": str(getattr(self.runtime, "value", self.runtime)), "image": self.image,
        }  # fmt: skip
        if self.extra:
            doc[platform] = dict(self.extra)
        return doc

    def __post_init__(self) -> None:
        if self.min_slices > self.max_slices:
            raise FieldError("min_slices", f"must be <= max_slices ({self.max_slices}), got {self.min_slices}")
        if self.buffer_slices > self.max_slices:
            raise FieldError("buffer_slices", f"must be <= max_slices ({self.max_slices}), got {self.buffer_slices}")


@dataclass(frozen=True, config=_DATACLASS)
class ClusterConfig:
    """The whole file: the fixed local worker groups and the autoscaled scale groups."""

    worker_groups: tuple[WorkerGroupConfig, ...] = ()
    scale_groups: tuple[ScaleGroupConfig, ...] = ()
    source: str | None = field(default=None, compare=False)
    """The file this came from (recorded in the cluster state), None when built in code."""
    scan_interval_seconds: Seconds = DEFAULT_SCAN_INTERVAL_SECONDS
    """How often the autoscaler looks while slices may change unannounced: READY slices with work, spare
    slices of a `buffer_slices` group (`autoscaler.scan_interval`; cluster-autoscaler's --scan-interval).
    Otherwise the scheduler wakes it when a job cannot be placed, and deadlines it knows of (an idle slice's
    scale_down_delay) wake it on time."""
    backoff_seconds: Seconds = DEFAULT_BACKOFF_SECONDS
    """A group's first back-off after its slices failed (quota exhausted: at once; else two failures in a
    row), doubling with each further failure to 600 s (`autoscaler.backoff`). A refusal (a config or
    permission problem) backs off 600 s (doubling to an hour) whatever this is."""
    slice_heartbeat_timeout_seconds: Seconds = DEFAULT_SLICE_HEARTBEAT_TIMEOUT_SECONDS
    """How long a slice's long steps (create, bootstrap, watch, drain, terminate) may go without a heartbeat
    before Temporal runs them again on a live controller (`autoscaler.slice_heartbeat_timeout`): what a
    controller that dies under a slice costs it. They beat every 1-3 s, so at least 5 s."""
    sharing: SharingSettings = field(default_factory=SharingSettings)
    """Credits, rates, fair share's half-life and the preemption grace (`sharing:`, iris.config.sharing)."""
    auth: AuthFile = NO_AUTH
    """Team mode (`auth: tokens`, iris.auth.settings); the default is one user, no login."""

    def __post_init__(self) -> None:
        if self.scan_interval_seconds <= 0:
            raise FieldError("autoscaler.scan_interval", f"must be > 0, got {self.scan_interval_seconds:g}s")
        if self.backoff_seconds <= 0:
            raise FieldError("autoscaler.backoff", f"must be > 0, got {self.backoff_seconds:g}s")
        beats = self.slice_heartbeat_timeout_seconds
        if not MIN_SLICE_HEARTBEAT_SECONDS <= beats <= MAX_SLICE_HEARTBEAT_SECONDS:
            raise FieldError("autoscaler.slice_heartbeat_timeout", f"must be at least {MIN_SLICE_HEARTBEAT_SECONDS:g}s "
                             f"and at most {MAX_SLICE_HEARTBEAT_SECONDS:g}s, got {beats:g}s")  # fmt: skip
        names = [g.name for g in self.worker_groups] + [g.name for g in self.scale_groups]
        paths = [f"local.worker_groups[{i}]" for i in range(len(self.worker_groups))]
        paths += [f"scale_groups[{i}]" for i in range(len(self.scale_groups))]
        seen: set[str] = set()
        for name, path in zip(names, paths, strict=True):
            if name in seen:  # group names prefix worker and slice ids, so two groups would share ids
                raise FieldError(f"{path}.name", f"duplicate group name {name!r}; group names must be unique")
            seen.add(name)
        total = sum(g.count for g in self.worker_groups)
        if total > MAX_LOCAL_WORKERS:
            raise FieldError(
                "local.worker_groups",
                f"{total} local workers in all would be {total} processes on this machine; at most "
                f"{MAX_LOCAL_WORKERS} (scale_groups run bigger fleets on other machines)",
            )

    def local_workers(self) -> list[LocalWorkerSpec]:
        """Every fixed local worker, group by group, host by host."""
        return [spec for group in self.worker_groups for spec in group.workers()]


def default_config() -> ClusterConfig:
    """The fleet started when no config is given: two plain 2-core, 4 GiB workers so `iris run` works."""
    return ClusterConfig(
        worker_groups=(WorkerGroupConfig(name="cpu", count=2, cpu_millis=2000, memory_bytes=parse_memory("4g")),),
    )


# ---------------------------------------------------------------------------- the file's schema


class ResourcesFile(BaseModel):
    """`resources: {cpu, memory, gpus, tpus}` of each host."""

    model_config = _FROZEN

    cpu: Millicores
    memory: Bytes
    gpus: Devices = 0
    tpus: Devices = 0


def _runs_something(resources: ResourcesFile) -> ResourcesFile:
    """A local worker with no cpu or no memory could run no task (a scale group's 0 means "the platform says")."""
    for key in ("cpu", "memory"):
        if getattr(resources, key) <= 0:
            raise ValueError(f"{key} must be more than 0: a worker with none runs no task")
    if resources.memory < MIN_MEMORY:
        raise ValueError(f"memory must be at least 1MiB: a worker with less runs no task, got {resources.memory}")
    return resources


class WorkerGroupFile(BaseModel):
    """One entry of `local.worker_groups`."""

    model_config = _FROZEN

    name: GroupName
    count: LocalCount = 1
    resources: Annotated[ResourcesFile, AfterValidator(_runs_something)]
    attributes: Attributes = {}
    index_attribute: AttributeKey | None = None
    runtime: RuntimeField = Runtime.PROCESS
    image: Image = ""

    def config(self) -> WorkerGroupConfig:
        return WorkerGroupConfig(
            name=self.name, count=self.count, cpu_millis=self.resources.cpu, memory_bytes=self.resources.memory,
            gpus=self.resources.gpus, tpus=self.resources.tpus, attributes=dict(self.attributes),
            index_attribute=self.index_attribute, runtime=self.runtime, image=self.image,
        )


_NO_RESOURCES = ResourcesFile(cpu=0, memory=0)


class ScaleGroupFile(BaseModel):
    """One entry of `scale_groups`; the platform's own settings live under a key named after it."""

    model_config = _FROZEN

    name: GroupName
    platform: PlatformField = Platform.LOCAL
    hosts_per_slice: AtLeastOne = 1
    min_slices: AtLeastZero = 0
    max_slices: AtLeastOne = DEFAULT_MAX_SLICES
    buffer_slices: AtLeastZero = 0
    resources: ResourcesFile = _NO_RESOURCES
    attributes: Attributes = {}
    scale_up_delay: Seconds = 0.0
    scale_down_delay: Seconds = 300.0
    runtime: RuntimeField = Runtime.PROCESS
    image: Image = ""
    local: Any = None
    manual: Any = None
    gcp: Any = None
    coreweave: Any = None

    def settings(self) -> dict[str, Any]:
        """The platform block (`gcp: {...}`); a block for another platform is a mistake, not ignored."""
        for other in Platform:
            if other != self.platform and getattr(self, other.value) is not None:
                raise FieldError(other.value, f"settings for platform {other.value!r} but platform is "
                                              f"{self.platform.value!r}")
        block = getattr(self, self.platform.value)
        if block is None:
            return {}
        if not isinstance(block, dict):
            raise FieldError(self.platform.value, f"platform settings must be a mapping, got {kind(block)}")
        return dict(block)

    def config(self) -> ScaleGroupConfig:
        return ScaleGroupConfig(
            name=self.name, platform=self.platform, hosts_per_slice=self.hosts_per_slice,
            min_slices=self.min_slices, max_slices=self.max_slices, cpu_millis=self.resources.cpu,
            memory_bytes=self.resources.memory, gpus=self.resources.gpus, tpus=self.resources.tpus,
            attributes=dict(self.attributes), scale_up_delay_seconds=self.scale_up_delay,
            scale_down_delay_seconds=self.scale_down_delay, extra=self.settings(), runtime=self.runtime,
            image=self.image, buffer_slices=self.buffer_slices,
        )


class LocalFile(BaseModel):
    """`local:`: the fixed workers of the local cluster."""

    model_config = _FROZEN

    worker_groups: Annotated[tuple[WorkerGroupFile, ...], ListOrNone] = ()


class AutoscalerFile(BaseModel):
    """`autoscaler:`: how the autoscaler paces itself."""

    model_config = _FROZEN

    scan_interval: Seconds = DEFAULT_SCAN_INTERVAL_SECONDS
    backoff: Seconds = DEFAULT_BACKOFF_SECONDS
    slice_heartbeat_timeout: Seconds = DEFAULT_SLICE_HEARTBEAT_TIMEOUT_SECONDS


class ClusterFile(BaseModel):
    """The whole file."""

    model_config = _FROZEN

    local: LocalFile = LocalFile()
    scale_groups: Annotated[tuple[ScaleGroupFile, ...], ListOrNone] = ()
    autoscaler: AutoscalerFile = AutoscalerFile()
    sharing: SharingFile = SharingFile()
    auth: AuthField = NO_AUTH


# ---------------------------------------------------------------------------- reading


def load_config(path: str | Path) -> ClusterConfig:
    """Read and validate a config file; errors name the file and the field.

    An empty file is an error rather than a silent fleet of nothing: leave out `--config` for
    the default fleet, or write the groups you want (`local: {worker_groups: []}` for none).
    """
    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"{source}: cannot read config file: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{source}: not valid YAML: {' '.join(str(e).split())}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{source}: not a text file (UTF-8): {e.reason} at byte {e.start}") from None
    if data is None:
        raise ValueError(
            f"{source}: the config file is empty; leave out --config for the default fleet "
            "(2 workers), or list the groups (`local: {worker_groups: []}` for none)"
        )
    return parse_config(data, source)


def parse_config(data: Any, source: str) -> ClusterConfig:
    """Validate an already-loaded YAML document; `source` prefixes every error message."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: (top level): must be a mapping, got {kind(data)}")
    try:
        parsed = ClusterFile.model_validate(data)
    except ValidationError as e:
        raise one_line_error(e, source, ClusterFile) from None
    worker_groups = tuple(
        _build(g.config, source, f"local.worker_groups[{i}]") for i, g in enumerate(parsed.local.worker_groups)
    )
    scale_groups = []
    for i, g in enumerate(parsed.scale_groups):
        group = _build(g.config, source, f"scale_groups[{i}]")
        _check_platform_settings(group, source, f"scale_groups[{i}].{group.platform.value}")
        scale_groups.append(group)
    config: ClusterConfig = _build(
        lambda: ClusterConfig(worker_groups=worker_groups, scale_groups=tuple(scale_groups), source=source,
                              scan_interval_seconds=parsed.autoscaler.scan_interval,
                              backoff_seconds=parsed.autoscaler.backoff,
                              slice_heartbeat_timeout_seconds=parsed.autoscaler.slice_heartbeat_timeout,
                              sharing=parsed.sharing.settings(), auth=parsed.auth),
        source, "",
    )
    return config


def _build(make: Any, source: str, path: str) -> Any:
    """Run `make()`, turning its errors (a dataclass's own checks) into one line under `path`."""
    try:
        return make()
    except FieldError as e:
        where = f"{path}.{e.subpath}" if path else e.subpath
        raise ValueError(f"{source}: {where}: {e.message}") from None
    except ValidationError as e:
        error = one_line_error(e, source, None)
        prefix = f"{source}: {path}." if path else f"{source}: "
        raise ValueError(str(error).replace(f"{source}: ", prefix, 1)) from None


def _check_platform_settings(group: ScaleGroupConfig, source: str, path: str) -> None:
    """Validate the platform block with the platform module's own `Settings`, when that module is installed.

    The module is imported only for platforms the file uses (a cloud SDK loads only where that
    cloud is configured); a platform whose module is absent is checked when the controller starts it.
    """
    settings_model = platform_settings_model(group.platform.value)
    if settings_model is None:
        return
    try:
        settings_model.model_validate(dict(group.extra))
    except ValidationError as e:
        error = one_line_error(e, source, settings_model)
        raise ValueError(str(error).replace(f"{source}: ", f"{source}: {path}.", 1)) from None
    except ValueError as e:  # a Settings validator that raises plain ValueError
        raise ValueError(f"{source}: {path}: {e}") from None


def platform_settings_model(platform: str) -> type[BaseModel] | None:
    """The pydantic `Settings` of platform `platform`'s module, or None if it has none (or is not installed)."""
    try:
        from activities.platforms import REGISTRY
    except ImportError:
        return None
    target = REGISTRY.get(platform)
    if target is None:
        return None
    try:
        module = importlib.import_module(target.partition(":")[0])
    except ImportError:
        return None
    model = getattr(module, "Settings", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


__all__ = [
    "DEFAULT_MAX_SLICES",
    "MAX_LOCAL_WORKERS",
    "AttributeValue",
    "ClusterConfig",
    "LocalWorkerSpec",
    "Platform",
    "Runtime",
    "ScaleGroupConfig",
    "WorkerGroupConfig",
    "default_config",
    "load_config",
    "parse_config",
    "parse_duration",
]
