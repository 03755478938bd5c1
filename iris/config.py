"""The local cluster config file (`iris cluster up --config FILE`), parsed into frozen dataclasses.

The YAML is read once, at the edge: every field is checked and normalized (memory
strings to bytes, cores to millicores, "5m" to seconds) so the local cluster and the
autoscaler never re-validate. A mistake in the file is a `ValueError` that names the
file and the YAML path of the field ("config.yaml: local.worker_groups[1].count: ..."),
and unknown keys are errors too, so a typo is never silently ignored.

The dataclasses also validate themselves in `__post_init__`, so one built in Python
(tests, `default_config()`) obeys the same rules as one read from a file.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from activities.contracts import RuntimeName
from iris.units import parse_cpu, parse_memory

AttributeValue = str | int | float | bool
"""What an attribute may hold: scalars only, so constraints can compare them."""

_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
# Attribute keys travel as `--attribute K=V` and appear in constraint expressions, so no
# '=', '!', '<', '>' or whitespace; ':' is allowed for taints ("taint:preemptible").
_ATTRIBUTE_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


Runtime = RuntimeName
"""How a worker runs a task (the names live in the shared contract module)."""


class Platform(StrEnum):
    """Where a scale group's slices come from."""

    LOCAL = "local"
    MANUAL = "manual"
    GCP = "gcp"
    COREWEAVE = "coreweave"


def _check_name(name: object, what: str) -> None:
    """Names become worker ids and process names, so they stay short and shell/file safe."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"name: {what} name must be letters, digits, '-', '_' or '.', "
            f"starting and ending with a letter or digit; got {name!r}"
        )


def _check_int(value: object, field_name: str, minimum: int) -> None:
    """Counts must be real integers (not bools, not 2.0) so a typo cannot round silently."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field_name}: must be an integer >= {minimum}, got {value!r}")


def _check_attribute_key(key: object, field_name: str) -> None:
    """An attribute key is what constraints and `--attribute K=V` name, so it must be plain text."""
    if not isinstance(key, str) or not _ATTRIBUTE_KEY_RE.match(key):
        raise ValueError(
            f"{field_name}: attribute key must be letters, digits and '_.:/-' (e.g. 'tpu-name', "
            f"'taint:preemptible'), got {key!r}"
        )


def _check_attributes(attributes: object, field_name: str = "attributes") -> None:
    """Attribute values are scalars; a list or mapping (or a missing value) cannot be matched."""
    if not isinstance(attributes, dict):
        raise ValueError(f"{field_name}: must be a mapping of key: value, got {type(attributes).__name__}")
    for key, value in attributes.items():
        _check_attribute_key(key, f"{field_name}.{key}")
        if not isinstance(value, (str, int, float, bool)):
            shown = "nothing" if value is None else type(value).__name__
            raise ValueError(
                f"{field_name}.{key}: attribute value must be a string, number or bool, got {shown}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{field_name}.{key}: attribute value must be finite, got {value!r}")


def _check_runtime(config: Any) -> None:
    """Normalize `config.runtime` to a Runtime, or say which names exist."""
    try:
        object.__setattr__(config, "runtime", Runtime(config.runtime))
    except ValueError:
        raise ValueError(
            f"runtime: must be one of {', '.join(r.value for r in Runtime)}, got {config.runtime!r}"
        ) from None


def _check_image(image: object, field_name: str = "image") -> None:
    """An image reference is one token: it becomes a command-line value and an engine argument."""
    if not isinstance(image, str) or any(c.isspace() or c == "\0" for c in image):
        raise ValueError(f"{field_name}: must be an image reference like 'python:3.11', got {image!r}")


def _check_resources(cpu_millis: object, memory_bytes: object, gpus: object, tpus: object) -> None:
    """Capacities are exact non-negative integers (millicores, bytes, devices)."""
    _check_int(cpu_millis, "resources.cpu (millicores)", 0)
    _check_int(memory_bytes, "resources.memory (bytes)", 0)
    _check_int(gpus, "resources.gpus", 0)
    _check_int(tpus, "resources.tpus", 0)


@dataclass(frozen=True)
class LocalWorkerSpec:
    """One `iris worker serve` process of the local cluster: its id, capacity and labels."""

    worker_id: str
    cpu_millis: int
    memory_bytes: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict, hash=False)
    runtime: Runtime = Runtime.PROCESS
    gpus: int = 0
    tpus: int = 0
    image: str = ""  # the default container image of a docker/containerd worker


@dataclass(frozen=True)
class WorkerGroupConfig:
    """`count` identical local workers; with `index_attribute`, host i is labelled with i (a fake slice)."""

    name: str
    count: int
    cpu_millis: int
    memory_bytes: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict, hash=False)
    index_attribute: str | None = None
    runtime: Runtime = Runtime.PROCESS
    gpus: int = 0
    tpus: int = 0
    image: str = ""  # the default container image of a docker/containerd worker

    def __post_init__(self) -> None:
        _check_name(self.name, "worker group")
        _check_image(self.image)
        _check_int(self.count, "count", 1)
        _check_resources(self.cpu_millis, self.memory_bytes, self.gpus, self.tpus)
        _check_attributes(self.attributes)
        _check_runtime(self)
        if self.index_attribute is not None:
            _check_attribute_key(self.index_attribute, "index_attribute")
            if self.index_attribute in self.attributes:
                raise ValueError(
                    f"index_attribute: {self.index_attribute!r} is also set in attributes; "
                    "each host's value would be ambiguous"
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
                    worker_id=f"{self.name}-{i}",
                    cpu_millis=self.cpu_millis,
                    memory_bytes=self.memory_bytes,
                    attributes=attributes,
                    runtime=self.runtime,
                    gpus=self.gpus,
                    tpus=self.tpus,
                    image=self.image,
                )
            )
        return specs


@dataclass(frozen=True)
class ScaleGroupConfig:
    """Slices of `hosts_per_slice` identical hosts that the autoscaler creates and deletes on demand."""

    name: str
    platform: Platform
    hosts_per_slice: int
    min_slices: int
    max_slices: int
    cpu_millis: int
    memory_bytes: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict, hash=False)
    scale_up_delay_seconds: float = 0.0
    scale_down_delay_seconds: float = 300.0
    gpus: int = 0
    tpus: int = 0
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    """The platform's own settings (the mapping under the key named after the platform, e.g. `gcp:`)."""
    runtime: Runtime = Runtime.PROCESS
    """How the group's agents run tasks (`iris worker serve --runtime`)."""
    image: str = ""
    """The default container image of the group's agents (`--default-image`)."""

    def __post_init__(self) -> None:
        _check_name(self.name, "scale group")
        _check_runtime(self)
        _check_image(self.image)
        try:
            object.__setattr__(self, "platform", Platform(self.platform))
        except ValueError:
            raise ValueError(
                f"platform: must be one of {', '.join(p.value for p in Platform)}, got {self.platform!r}"
            ) from None
        _check_int(self.hosts_per_slice, "hosts_per_slice", 1)
        _check_int(self.min_slices, "min_slices", 0)
        _check_int(self.max_slices, "max_slices", 1)
        if self.min_slices > self.max_slices:
            raise ValueError(f"min_slices: must be <= max_slices ({self.max_slices}), got {self.min_slices}")
        _check_resources(self.cpu_millis, self.memory_bytes, self.gpus, self.tpus)
        _check_attributes(self.attributes)
        for name in ("scale_up_delay_seconds", "scale_down_delay_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name}: must be a non-negative number of seconds, got {value!r}")
        if not isinstance(self.extra, dict):
            raise ValueError(f"{self.platform.value}: platform settings must be a mapping")


@dataclass(frozen=True)
class ClusterConfig:
    """The whole file: the fixed local worker groups and the autoscaled scale groups."""

    worker_groups: tuple[WorkerGroupConfig, ...] = ()
    scale_groups: tuple[ScaleGroupConfig, ...] = ()
    source: str | None = field(default=None, compare=False)
    """The file this came from (recorded in the cluster state), None when built in code."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_groups", tuple(self.worker_groups))
        object.__setattr__(self, "scale_groups", tuple(self.scale_groups))
        _check_unique_names([g.name for g in self.worker_groups] + [g.name for g in self.scale_groups])

    def local_workers(self) -> list[LocalWorkerSpec]:
        """Every fixed local worker, group by group, host by host."""
        return [spec for group in self.worker_groups for spec in group.workers()]


def _check_unique_names(names: Iterable[str], where: Iterable[str] | None = None) -> None:
    """Group names prefix worker and slice ids, so two groups with one name would share ids."""
    seen: set[str] = set()
    paths = list(where) if where is not None else None
    for i, name in enumerate(names):
        if name in seen:
            location = f"{paths[i]}: " if paths is not None else "name: "
            raise ValueError(f"{location}duplicate group name {name!r}; group names must be unique")
        seen.add(name)


def default_config() -> ClusterConfig:
    """The fleet started when no config is given: two plain 2-core, 4 GiB workers so `iris run` works."""
    return ClusterConfig(
        worker_groups=(
            WorkerGroupConfig(name="cpu", count=2, cpu_millis=2000, memory_bytes=parse_memory("4g")),
        ),
    )


def load_config(path: str | Path) -> ClusterConfig:
    """Read and validate a config file; errors name the file and the field."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"{source}: cannot read config file: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{source}: not valid YAML: {e}") from None
    return parse_config({} if data is None else data, source)


def parse_config(data: dict[str, Any], source: str) -> ClusterConfig:
    """Validate an already-loaded YAML document; `source` prefixes every error message."""
    top = _Mapping(data, source, "")
    local = _Mapping(top.get("local", {}), source, "local")
    worker_groups = [
        _parse_worker_group(item, source, f"local.worker_groups[{i}]")
        for i, item in enumerate(local.get_list("worker_groups"))
    ]
    local.finish()
    scale_groups = [
        _parse_scale_group(item, source, f"scale_groups[{i}]")
        for i, item in enumerate(top.get_list("scale_groups"))
    ]
    top.finish()
    paths = [f"local.worker_groups[{i}].name" for i in range(len(worker_groups))]
    paths += [f"scale_groups[{i}].name" for i in range(len(scale_groups))]
    names = [g.name for g in worker_groups] + [g.name for g in scale_groups]
    try:
        _check_unique_names(names, paths)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    return ClusterConfig(worker_groups=tuple(worker_groups), scale_groups=tuple(scale_groups), source=source)


class _Mapping:
    """A YAML mapping being read at `path`: tracks the keys used so leftovers (typos) are errors."""

    _MISSING: Any = object()

    def __init__(self, data: object, source: str, path: str) -> None:
        self.source = source
        self.path = path
        if not isinstance(data, dict):
            raise self.error(None, f"must be a mapping, got {_kind(data)}")
        self.data: dict[Any, Any] = data
        self.used: set[str] = set()

    def where(self, key: str | None) -> str:
        """The YAML path of `key` (or of this mapping), e.g. `local.worker_groups[1].count`."""
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, message: str) -> ValueError:
        """A ValueError naming the file and the field."""
        return ValueError(f"{self.source}: {self.where(key)}: {message}")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """The value at `key`; a missing key without a default is an error."""
        self.used.add(key)
        if key in self.data:
            return self.data[key]
        if default is self._MISSING:
            raise self.error(key, "is required")
        return default

    def get_list(self, key: str) -> list[Any]:
        """A list at `key` (absent or empty = no items)."""
        value = self.get(key, None)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"must be a list, got {_kind(value)}")
        return value

    def finish(self, allowed_extra: Iterable[str] = ()) -> None:
        """Reject keys that were never read: they are typos or options this version does not have."""
        known = self.used | set(allowed_extra)
        for key in self.data:
            if key not in known:
                hint = difflib.get_close_matches(str(key), sorted(known), n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
                raise self.error(str(key), f"unknown key{suggestion} (known: {', '.join(sorted(known))})")

    def construct(self, cls: type[Any], **kwargs: Any) -> Any:
        """Build a config dataclass, prefixing its own field errors with this mapping's path."""
        try:
            return cls(**kwargs)
        except ValueError as e:
            raise ValueError(f"{self.source}: {self.path}.{e}") from None


def _kind(value: object) -> str:
    """A YAML-ish name for a value's type, for error messages."""
    if value is None:
        return "nothing"
    names = {"dict": "a mapping", "list": "a list", "str": "a string"}
    return names.get(type(value).__name__, type(value).__name__)


def _parse_resources(node: _Mapping) -> dict[str, int]:
    """`resources: {cpu, memory, gpus, tpus}` in exact units (millicores, bytes, devices)."""
    resources = _Mapping(node.get("resources"), node.source, node.where("resources"))
    field_prefix = f"{node.source}: {resources.path}"
    parsed = {
        "cpu_millis": parse_cpu(resources.get("cpu"), field=f"{field_prefix}.cpu"),
        "memory_bytes": parse_memory(resources.get("memory"), field=f"{field_prefix}.memory"),
        "gpus": resources.get("gpus", 0),
        "tpus": resources.get("tpus", 0),
    }
    resources.finish()
    for key in ("gpus", "tpus"):
        value = parsed[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise resources.error(key, f"must be an integer >= 0, got {value!r}")
    return parsed


def _attributes(node: _Mapping) -> Any:
    """The `attributes` mapping (absent or empty = none); its contents are checked by the dataclass."""
    value = node.get("attributes", None)
    return {} if value is None else value


def _parse_worker_group(data: object, source: str, path: str) -> WorkerGroupConfig:
    """One entry of `local.worker_groups`."""
    node = _Mapping(data, source, path)
    kwargs: dict[str, Any] = {
        "name": node.get("name"),
        "count": node.get("count", 1),
        "attributes": _attributes(node),
        "index_attribute": node.get("index_attribute", None),
        "runtime": node.get("runtime", Runtime.PROCESS.value),
        "image": node.get("image", "") or "",
        **_parse_resources(node),
    }
    node.finish()
    config: WorkerGroupConfig = node.construct(WorkerGroupConfig, **kwargs)
    return config


def parse_duration(value: object, field_name: str) -> float:
    """Seconds from "0s", "30s", "5m", "1h", "1m30s", "500ms" or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{field_name}: expected a duration like '30s' or '5m', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _DURATION_PART_RE.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            try:
                seconds = float(text)
            except ValueError:
                raise ValueError(
                    f"{field_name}: cannot parse {value!r}; use a duration like '0s', '30s', '5m', '1h'"
                ) from None
        else:
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    else:
        raise ValueError(f"{field_name}: expected a duration like '30s' or '5m', got {_kind(value)}")
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{field_name}: must be a non-negative duration, got {value!r}")
    return seconds


def _parse_scale_group(data: object, source: str, path: str) -> ScaleGroupConfig:
    """One entry of `scale_groups`; platform settings live under a key named after the platform."""
    node = _Mapping(data, source, path)
    platform = node.get("platform", Platform.LOCAL.value)
    platform_names = {p.value for p in Platform}
    if not isinstance(platform, str) or platform not in platform_names:
        raise node.error("platform", f"must be one of {', '.join(sorted(platform_names))}, got {platform!r}")
    extra = node.get(platform, None)
    extra = {} if extra is None else extra
    if not isinstance(extra, dict):
        raise node.error(platform, f"platform settings must be a mapping, got {_kind(extra)}")
    for other in sorted(platform_names - {platform}):
        if other in node.data:
            raise node.error(other, f"settings for platform {other!r} but platform is {platform!r}")
    kwargs: dict[str, Any] = {
        "name": node.get("name"),
        "platform": platform,
        "hosts_per_slice": node.get("hosts_per_slice", 1),
        "min_slices": node.get("min_slices", 0),
        "max_slices": node.get("max_slices"),
        "attributes": _attributes(node),
        "scale_up_delay_seconds": parse_duration(
            node.get("scale_up_delay", 0), f"{source}: {node.where('scale_up_delay')}"
        ),
        "scale_down_delay_seconds": parse_duration(
            node.get("scale_down_delay", 300), f"{source}: {node.where('scale_down_delay')}"
        ),
        "extra": dict(extra),
        "runtime": node.get("runtime", Runtime.PROCESS.value),
        "image": node.get("image", "") or "",
        **_parse_resources(node),
    }
    node.finish()
    config: ScaleGroupConfig = node.construct(ScaleGroupConfig, **kwargs)
    return config
