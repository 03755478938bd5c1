"""The local cluster config file: the documented example, defaults, and errors that name the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from iris.config.cluster_file import (
    ClusterConfig,
    LocalWorkerSpec,
    Platform,
    Runtime,
    ScaleGroupConfig,
    WorkerGroupConfig,
    default_config,
    load_config,
    parse_config,
    parse_duration,
)

GiB = 1024**3
SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "public-api.md"

EXAMPLE = """
local:
  worker_groups:
    - name: cpu
      count: 2
      resources: {cpu: 2, memory: 4g}
    - name: slice-a                       # a fake 4-host TPU slice
      count: 4
      resources: {cpu: 1, memory: 2g}
      attributes: {tpu-name: slice-a, tpu-topology: v5e-16}
      index_attribute: tpu-worker-id      # host i gets tpu-worker-id = i
    - name: boxed
      count: 1
      runtime: docker                     # process (default) | docker | containerd (with the runtimes work)
      resources: {cpu: 1, memory: 1g}

scale_groups:                             # slices the autoscaler creates and deletes (with the autoscaler work)
  - name: tpu-v5e-16
    platform: local                       # local | manual | gcp | coreweave (+ its own settings)
    hosts_per_slice: 4
    min_slices: 0
    max_slices: 2
    resources: {cpu: 1, memory: 2g}
    attributes: {tpu-topology: v5e-16}    # each host also gets tpu-name = <slice id>, tpu-worker-id = i
    scale_up_delay: 0s
    scale_down_delay: 30s
  - name: ssh-pool
    platform: manual                      # fixed hosts reached over SSH
    hosts_per_slice: 2
    max_slices: 1
    resources: {cpu: 1, memory: 1g}
    manual:
      hosts: ["10.0.0.5", "10.0.0.6:2222"]  # host[:port]
      user: root
      identity_file: ~/.ssh/iris_ed25519
      known_hosts: null                   # default: accept-new into $IRIS_HOME/known_hosts
      worker_command: null                # default: `iris worker serve` on the host's PATH
  - name: tpu-v5e-32
    platform: gcp
    hosts_per_slice: 8
    gcp: {project: my-proj, zone: us-central2-b, accelerator_type: v5litepod-32,
          runtime_version: v2-alpha-tpuv5-lite, spot: false,
          api_endpoint: null,                # host:port of the TPU API; null = Google's; a loopback
                                             # endpoint is reached without TLS, as emulators are
          ssh: {user: iris, identity_file: ~/.ssh/iris_ed25519, port: 22}}
          # on a TPU VM the agent reads tpu-name, tpu-worker-id, tpu-topology, accelerator type and
          # VM count from the metadata server ($GCE_METADATA_HOST when set, as google-auth does)
  - name: h100
    platform: coreweave                   # one slice = one NodePool = one bare-metal node
    hosts_per_slice: 1
    runtime: containerd
    coreweave: {namespace: iris, instance_type: gd-8xh100ib-i128, image: iris-worker:latest, kubeconfig: null}
"""

EXPECTED = ClusterConfig(
    worker_groups=(
        WorkerGroupConfig(name="cpu", count=2, cpu_millis=2000, memory_bytes=4 * GiB),
        WorkerGroupConfig(
            name="slice-a",
            count=4,
            cpu_millis=1000,
            memory_bytes=2 * GiB,
            attributes={"tpu-name": "slice-a", "tpu-topology": "v5e-16"},
            index_attribute="tpu-worker-id",
        ),
        WorkerGroupConfig(name="boxed", count=1, cpu_millis=1000, memory_bytes=GiB, runtime=Runtime.DOCKER),
    ),
    scale_groups=(
        ScaleGroupConfig(
            name="tpu-v5e-16",
            platform=Platform.LOCAL,
            hosts_per_slice=4,
            min_slices=0,
            max_slices=2,
            cpu_millis=1000,
            memory_bytes=2 * GiB,
            attributes={"tpu-topology": "v5e-16"},
            scale_up_delay_seconds=0.0,
            scale_down_delay_seconds=30.0,
        ),
        ScaleGroupConfig(
            name="ssh-pool",
            platform=Platform.MANUAL,
            hosts_per_slice=2,
            min_slices=0,
            max_slices=1,
            cpu_millis=1000,
            memory_bytes=GiB,
            extra={
                "hosts": ["10.0.0.5", "10.0.0.6:2222"], "user": "root", "identity_file": "~/.ssh/iris_ed25519",
                "known_hosts": None, "worker_command": None,
            },
        ),
        ScaleGroupConfig(
            name="tpu-v5e-32",
            platform=Platform.GCP,
            hosts_per_slice=8,
            min_slices=0,
            max_slices=1,  # DEFAULT_MAX_SLICES
            cpu_millis=0,  # no resources: the hosts say what they have
            memory_bytes=0,
            extra={
                "project": "my-proj", "zone": "us-central2-b", "accelerator_type": "v5litepod-32",
                "runtime_version": "v2-alpha-tpuv5-lite", "spot": False, "api_endpoint": None,
                "ssh": {"user": "iris", "identity_file": "~/.ssh/iris_ed25519", "port": 22},
            },
        ),
        ScaleGroupConfig(
            name="h100",
            platform=Platform.COREWEAVE,
            hosts_per_slice=1,
            min_slices=0,
            max_slices=1,
            cpu_millis=0,
            memory_bytes=0,
            runtime=Runtime.CONTAINERD,
            extra={"namespace": "iris", "instance_type": "gd-8xh100ib-i128", "image": "iris-worker:latest",
                   "kubeconfig": None},
        ),
    ),
)


def parse(text: str) -> ClusterConfig:
    """Parse YAML text as if it came from config.yaml."""
    return parse_config(yaml.safe_load(text), "config.yaml")


def test_public_api_example_parses_exactly() -> None:
    """The example in public-api.md parses into exactly the documented groups."""
    assert parse(EXAMPLE) == EXPECTED


@pytest.mark.skipif(not SPEC.exists(), reason="shared spec not beside the repository")
def test_example_matches_the_spec() -> None:
    """The example tested here is the one public-api.md shows, so the test follows the spec."""
    match = re.search(r"## Local cluster config.*?```yaml\n(.*?)```", SPEC.read_text(), re.S)
    assert match is not None
    assert parse(EXAMPLE) == parse(match.group(1))


def test_load_config_reads_a_file_and_records_its_path(tmp_path: Path) -> None:
    """load_config parses the file and remembers where it came from."""
    path = tmp_path / "config.yaml"
    path.write_text(EXAMPLE)
    config = load_config(path)
    assert config == EXPECTED
    assert str(path) == config.source


def test_index_attribute_labels_each_host() -> None:
    """With index_attribute, host i of a group is `<group>-<i>` and carries the attribute = i (an int)."""
    slice_a = parse(EXAMPLE).worker_groups[1]
    expected = [
        LocalWorkerSpec(
            worker_id=f"slice-a-{i}",
            cpu_millis=1000,
            memory_bytes=2 * GiB,
            attributes={"tpu-name": "slice-a", "tpu-topology": "v5e-16", "tpu-worker-id": i},
        )
        for i in range(4)
    ]
    assert expected == slice_a.workers()


def test_local_workers_lists_every_host_in_order() -> None:
    """ClusterConfig.local_workers covers every group, in file order."""
    ids = [w.worker_id for w in parse(EXAMPLE).local_workers()]
    assert ids == ["cpu-0", "cpu-1", "slice-a-0", "slice-a-1", "slice-a-2", "slice-a-3", "boxed-0"]


def test_defaults_fill_optional_fields() -> None:
    """Omitted optional fields take their defaults: count 1, process runtime, no attributes, no devices."""
    config = parse(
        """
local:
  worker_groups:
    - {name: w, resources: {cpu: 0.5, memory: 512m}}
scale_groups:
  - {name: s, max_slices: 3, resources: {cpu: 1, memory: 1g}}
"""
    )
    expected_worker = WorkerGroupConfig(name="w", count=1, cpu_millis=500, memory_bytes=512 * 1024**2)
    assert (expected_worker,) == config.worker_groups
    group = config.scale_groups[0]
    assert (
        group.platform,
        group.hosts_per_slice,
        group.min_slices,
        group.max_slices,
    ) == (Platform.LOCAL, 1, 0, 3)
    assert (group.scale_up_delay_seconds, group.scale_down_delay_seconds, group.extra) == (0.0, 300.0, {})
    assert (expected_worker.gpus, expected_worker.tpus) == (0, 0)
    assert 5.0 == config.scan_interval_seconds
    assert 0.5 == parse_config({"autoscaler": {"scan_interval": "500ms"}}, "config.yaml").scan_interval_seconds
    assert 10.0 == config.backoff_seconds
    assert 2.5 == parse_config({"autoscaler": {"backoff": "2500ms"}}, "config.yaml").backoff_seconds
    assert 10.0 == config.slice_heartbeat_timeout_seconds
    beats = parse_config({"autoscaler": {"slice_heartbeat_timeout": "5s"}}, "config.yaml")
    assert 5.0 == beats.slice_heartbeat_timeout_seconds


def test_empty_document_has_no_groups() -> None:
    """An empty file means no local workers and no scale groups (not an error)."""
    assert ClusterConfig() == parse_config({}, "config.yaml")


def test_default_config_is_two_plain_workers() -> None:
    """With no config the cluster gets two plain 2-core 4 GiB workers in group `cpu`."""
    expected = [
        LocalWorkerSpec(worker_id=f"cpu-{i}", cpu_millis=2000, memory_bytes=4 * GiB) for i in range(2)
    ]
    assert expected == default_config().local_workers()


def test_taint_keys_gpus_and_typed_attributes_are_kept() -> None:
    """`taint:x` keys are allowed and attribute values keep their YAML type (int, float, bool, str)."""
    config = parse(
        """
local:
  worker_groups:
    - name: g
      resources: {cpu: 4, memory: 8g, gpus: 2}
      attributes: {"taint:preemptible": true, zone: us-1, rank: 3, speed: 1.5}
"""
    )
    group = config.worker_groups[0]
    assert group.attributes == {"taint:preemptible": True, "zone": "us-1", "rank": 3, "speed": 1.5}
    assert group.workers()[0].gpus == 2


def test_platform_settings_go_to_extra() -> None:
    """A scale group's platform settings live under a key named after its platform."""
    config = parse(
        """
scale_groups:
  - name: v5e
    platform: gcp
    gcp: {project: p, zone: us-central2-b, accelerator_type: v5litepod-8, runtime_version: v2-alpha-tpuv5-lite}
    max_slices: 1
    resources: {cpu: 8, memory: 16g}
    scale_down_delay: 1h
"""
    )
    group = config.scale_groups[0]
    assert group.extra == {
        "project": "p", "zone": "us-central2-b", "accelerator_type": "v5litepod-8",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    assert group.scale_down_delay_seconds == 3600.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0s", 0.0), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1m30s", 90.0), ("500ms", 0.5), (12, 12.0)],
)
def test_parse_duration(text: str | int, expected: float) -> None:
    """Durations take s/m/h suffixes (combinable) or plain seconds."""
    assert expected == parse_duration(text, "delay")


BASE_WORKER = {"name": "a", "resources": {"cpu": 1, "memory": "1g"}}
BASE_SCALE = {"name": "s", "max_slices": 2, "resources": {"cpu": 1, "memory": "1g"}}


def with_worker(**changes: Any) -> dict[str, Any]:
    """A config whose second worker group is BASE_WORKER with `changes` (None deletes a key)."""
    group = {**BASE_WORKER, "name": "b", **changes}
    return {"local": {"worker_groups": [BASE_WORKER, {k: v for k, v in group.items() if v is not None}]}}


def with_scale(**changes: Any) -> dict[str, Any]:
    """A config whose only scale group is BASE_SCALE with `changes` (None deletes a key)."""
    group = {**BASE_SCALE, **changes}
    return {"scale_groups": [{k: v for k, v in group.items() if v is not None}]}


W = "config.yaml: local.worker_groups[1]"
S = "config.yaml: scale_groups[0]"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (with_worker(resources={"cpu": 1, "memory": "lots"}), f"{W}.resources.memory: cannot parse 'lots'"),
        (with_worker(resources={"cpu": "many", "memory": "1g"}), f"{W}.resources.cpu: cannot parse 'many'"),
        (with_worker(resources={"memory": "1g"}), f"{W}.resources.cpu: is required"),
        (with_worker(resources=None), f"{W}.resources: is required"),
        (with_worker(resources={"cpu": 1, "memory": "1g", "gpu": 1}), f"{W}.resources.gpu: unknown key"),
        (
            with_worker(resources={"cpu": 1, "memory": "1g", "gpus": -1}),
            f"{W}.resources.gpus: must be an integer",
        ),
        (with_worker(count=0), f"{W}.count: must be an integer >= 1, got 0"),
        (with_worker(count=2.5), f"{W}.count: must be an integer >= 1, got 2.5"),
        (with_worker(count="2"), f"{W}.count: must be an integer >= 1, got '2'"),
        (with_worker(cont=2), f"{W}.cont: unknown key; did you mean 'count'?"),
        (with_worker(name=None), f"{W}.name: is required"),
        (with_worker(name="a"), f"{W}.name: duplicate group name 'a'"),
        (with_worker(name="has space"), f"{W}.name: a name must be"),
        (with_worker(name="g" * 5000), f"{W}.name: a name must be 1-63 letters"),
        (with_worker(count=5000), f"{W}.count: 5000 local workers would start 5000 processes on this machine"),
        (with_worker(resourcez={}), f"{W}.resourcez: unknown key; did you mean 'resources'?"),
        (with_worker(attributes={"a\0b": 1}), f"{W}.attributes.a\0b: attribute key must be"),
        (with_worker(image="two words"), f"{W}.image: must be an image reference"),
        (with_worker(runtime="vm"), f"{W}.runtime: must be one of process, docker, containerd, got 'vm'"),
        (with_worker(attributes={"x": [1, 2]}), f"{W}.attributes.x: attribute value must be a string"),
        (with_worker(attributes={"x": {"y": 1}}), f"{W}.attributes.x: attribute value must be a string"),
        (with_worker(attributes={"taint:x": None}), f"{W}.attributes.taint:x: attribute value must be"),
        (with_worker(attributes={"a=b": 1}), f"{W}.attributes.a=b: attribute key must be"),
        (
            with_worker(attributes={"big": 12345678901234567890}),
            f"{W}.attributes.big: attribute value: an integer must be between -9223372036854775808 and "
            "9223372036854775807, got 12345678901234567890",
        ),
        (
            with_worker(resources={"cpu": 1, "memory": "99999999999999999999g"}),
            f"{W}.resources.memory: must be at most 9223372036854775807 bytes, got '99999999999999999999g'",
        ),
        (with_worker(resources={"cpu": 10**30, "memory": "1g"}), f"{W}.resources.cpu: must be at most"),
        (with_worker(resources={"cpu": 1, "memory": "1.5"}), f"{W}.resources.memory: a number of bytes must be whole"),
        (
            with_worker(resources={"cpu": 1, "memory": "512k"}),
            f"{W}.resources: memory must be at least 1MiB: a worker with less runs no task, got 524288",
        ),
        (
            with_worker(resources={"cpu": 1, "memory": "1g", "gpus": 2**40}),
            f"{W}.resources.gpus: must be at most 2147483647, got 1099511627776",
        ),
        (with_scale(attributes={"big": -(2**64)}), f"{S}.attributes.big: attribute value: an integer must be"),
        (with_scale(hosts_per_slice=2**40), f"{S}.hosts_per_slice: must be at most 2147483647"),
        (
            with_scale(resources={"cpu": 1, "memory": "1g", "tpus": 2**31}),
            f"{S}.resources.tpus: must be at most 2147483647",
        ),
        (with_worker(attributes=["x"]), f"{W}.attributes: must be a mapping"),
        (with_worker(index_attribute="x", attributes={"x": 1}), f"{W}.index_attribute: 'x' is also set"),
        (with_worker(index_attribute="bad key"), f"{W}.index_attribute: attribute key must be"),
        (with_scale(scale_up_delay="soon"), f"{S}.scale_up_delay: cannot parse 'soon'"),
        (with_scale(scale_down_delay="-5s"), f"{S}.scale_down_delay: cannot parse '-5s'"),
        (with_scale(scale_down_delay=-5), f"{S}.scale_down_delay: must be a non-negative duration"),
        (with_scale(platform="aws"), f"{S}.platform: must be one of"),
        (with_scale(gcp={"zone": "z"}), f"{S}.gcp: settings for platform 'gcp' but platform is 'local'"),
        (with_scale(platform="gcp", gcp="zone-a"), f"{S}.gcp: platform settings must be a mapping"),
        (with_scale(min_slices=3), f"{S}.min_slices: must be <= max_slices (2), got 3"),
        (with_scale(max_slices=None, min_slices=2), f"{S}.min_slices: must be <= max_slices (1), got 2"),
        (with_scale(platform="coreweave", coreweave={"instance_typ": "x"}), f"{S}.coreweave.instance_typ: unknown key"),
        (with_scale(max_slices=0), f"{S}.max_slices: must be an integer >= 1"),
        (with_scale(buffer_slices=3), f"{S}.buffer_slices: must be <= max_slices (2), got 3"),
        (with_scale(buffer_slices=-1), f"{S}.buffer_slices: must be an integer >= 0"),
        (with_scale(hosts_per_slice=0), f"{S}.hosts_per_slice: must be an integer >= 1"),
        (
            {"local": {"worker_groups": [BASE_WORKER]}, "scale_groups": [{**BASE_SCALE, "name": "a"}]},
            "config.yaml: scale_groups[0].name: duplicate group name 'a'",
        ),
        ({"locall": {}}, "config.yaml: locall: unknown key; did you mean 'local'?"),
        ({"local": {"workers": []}}, "config.yaml: local.workers: unknown key"),
        ({"local": []}, "config.yaml: local: must be a mapping, got a list"),
        ({"local": {"worker_groups": {"name": "a"}}}, "config.yaml: local.worker_groups: must be a list"),
        ({"local": {"worker_groups": ["a"]}}, "config.yaml: local.worker_groups[0]: must be a mapping"),
        ([1], "config.yaml: (top level): must be a mapping, got a list"),
        ({"autoscaler": {"scan_interval": "0s"}}, "config.yaml: autoscaler.scan_interval: must be > 0, got 0s"),
        ({"autoscaler": {"scan_interval": "often"}}, "config.yaml: autoscaler.scan_interval: cannot parse 'often'"),
        ({"autoscaler": {"backoff": "0s"}}, "config.yaml: autoscaler.backoff: must be > 0, got 0s"),
        ({"autoscaler": {"backoff": "soon"}}, "config.yaml: autoscaler.backoff: cannot parse 'soon'"),
        ({"autoscaler": {"slice_heartbeat_timeout": "4s"}},
         "config.yaml: autoscaler.slice_heartbeat_timeout: must be at least 5s and at most 600s, got 4s"),
        ({"autoscaler": {"slice_heartbeat_timeout": "11m"}},
         "config.yaml: autoscaler.slice_heartbeat_timeout: must be at least 5s and at most 600s, got 660s"),
        ({"autoscaler": {"scan": "1s"}}, "config.yaml: autoscaler.scan: unknown key"),
        ({"autoscaler": "fast"}, "config.yaml: autoscaler: must be a mapping"),
        (
            {"sharing": {"teams": [{"name": "default", "members": ["ana"], "quota": {"cpu": 1}}]}},
            "config.yaml: sharing.teams: team name 'default' is reserved for users in no team (its quota is zero)",
        ),
        (
            {"sharing": {"teams": [{"name": "a", "members": ["ana", "ana"]}]}},
            "config.yaml: sharing.teams: user 'ana' is listed twice in team 'a'",
        ),
        (
            {"local": {"worker_groups": [{"name": "w", "resources": {"cpu": 0, "memory": "1g"}}]}},
            "config.yaml: local.worker_groups[0].resources: cpu must be more than 0: a worker with none runs no task",
        ),
        (
            {"sharing": {"teams": [{"name": "a", "quota": {"cpu": 2}, "lending_limit": {"cpu": 5}}]}},
            "config.yaml: sharing.teams[0]: lending_limit.cpu is more than the team's quota.cpu (5 > 2)",
        ),
    ],
)
def test_errors_name_the_field(data: Any, message: str) -> None:
    """Every invalid field raises a ValueError whose message starts with the file and YAML path."""
    with pytest.raises(ValueError) as info:
        parse_config(data, "config.yaml")
    assert str(info.value).startswith(message), str(info.value)


def test_load_config_reports_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    """Unreadable or malformed files are ValueErrors naming the file."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ValueError, match=re.escape(f"{missing}: cannot read config file")):
        load_config(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("local: [unclosed\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}: not valid YAML")):
        load_config(bad)


def test_dataclasses_validate_when_built_in_code() -> None:
    """Configs built in Python obey the same rules as parsed ones (validated at construction)."""
    with pytest.raises(ValueError, match=r"(?s)count.*must be an integer >= 1"):
        WorkerGroupConfig(name="a", count=0, cpu_millis=1000, memory_bytes=GiB)
    with pytest.raises(ValueError, match=r"(?s)count.*at most 64"):
        WorkerGroupConfig(name="a", count=5000, cpu_millis=1000, memory_bytes=GiB)
    with pytest.raises(ValueError, match=r"(?s)runtime.*must be one of"):
        WorkerGroupConfig(name="a", count=1, cpu_millis=1000, memory_bytes=GiB, runtime="vm")  # type: ignore[arg-type]
    group = WorkerGroupConfig(name="a", count=1, cpu_millis=1000, memory_bytes=GiB)
    with pytest.raises(ValueError, match=r"worker_groups\[1\]\.name: duplicate group name 'a'"):
        ClusterConfig(worker_groups=(group, group))


def test_runtime_string_is_normalized_to_enum() -> None:
    """A runtime given as a plain string becomes the Runtime enum (and still equals the string)."""
    group = WorkerGroupConfig(name="a", count=1, cpu_millis=1, memory_bytes=1, runtime="docker")  # type: ignore[arg-type]
    assert Runtime.DOCKER is group.runtime
    assert group.runtime == "docker"


def test_buffer_slices_reaches_the_scale_group() -> None:
    """`buffer_slices: N` is read into the group's config (0 when absent)."""
    config = parse_config({"scale_groups": [{**BASE_SCALE, "buffer_slices": 1}]}, "config.yaml")
    assert 1 == config.scale_groups[0].buffer_slices
    assert 0 == parse_config({"scale_groups": [BASE_SCALE]}, "config.yaml").scale_groups[0].buffer_slices
