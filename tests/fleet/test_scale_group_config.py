"""Scale groups travel from the cluster config to the controller's autoscaler unchanged, and bad ones fail early."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from iris.config.cluster_file import parse_config
from iris.controller.control_plane import autoscaler_config
from iris.local.cluster import scale_groups_document

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_fleet_config() -> dict[str, object]:
    """The `fleet.yaml` block of the README's "Scale groups" section."""
    block = re.search(r"```yaml\n# fleet.yaml\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README has no fleet.yaml example"
    data = yaml.safe_load(block.group(1))
    assert isinstance(data, dict)
    return data


def test_the_readme_example_is_accepted_by_the_controller() -> None:
    """The README's scale group config parses and gives the autoscaler one local group as written."""
    config = autoscaler_config(parse_config(readme_fleet_config(), "README.md"))
    (group,) = config.groups
    assert ("tpu-v5e-16", "local", 4, 0, 1, 30.0) == (
        group.spec.name, group.spec.platform, group.spec.hosts_per_slice, group.min_slices, group.max_slices,
        group.scale_down_delay,
    )  # fmt: skip
    assert {"tpu-topology": "v5e-16"} == group.spec.attributes


def test_the_file_handed_to_the_controller_reads_back_to_the_same_groups() -> None:
    """`iris cluster up` writes the scale groups to a file for the controller; reading it gives the same groups."""
    data = {
        "scale_groups": [
            {"name": "a", "platform": "local", "hosts_per_slice": 2, "min_slices": 1, "max_slices": 3,
             "resources": {"cpu": 1.5, "memory": "1g", "gpus": 1, "tpus": 4},
             "attributes": {"k": "v", "n": 2, "f": True},
             "scale_up_delay": "1m30s", "scale_down_delay": "250ms", "local": {"max_hosts": 8},
             "buffer_slices": 1, "runtime": "docker", "image": "python:3.11-slim"},
        ],
        "autoscaler": {"scan_interval": "1.5s", "backoff": "4s", "slice_heartbeat_timeout": "7s"},
    }  # fmt: skip
    config = parse_config(data, "test")
    # Every field of a group is set here (none at its default), so a field the file leaves out fails below:
    # buffer_slices was dropped so, and a local cluster's group kept no buffer.
    (group,) = config.scale_groups
    at_default = [f.name for f in dataclasses.fields(group) if f.default is not dataclasses.MISSING and
                  getattr(group, f.name) == f.default]  # fmt: skip
    assert [] == at_default
    again = parse_config(yaml.safe_load(yaml.safe_dump(scale_groups_document(config))), "scale-groups.yaml")
    assert config.scale_groups == again.scale_groups
    assert 1.5 == again.scan_interval_seconds == autoscaler_config(again).scan_interval_seconds
    assert 4.0 == again.backoff_seconds == autoscaler_config(again).backoff_seconds
    assert 7.0 == again.slice_heartbeat_timeout_seconds == autoscaler_config(again).slice_heartbeat_seconds


def test_a_bad_platform_block_is_refused_naming_the_group_and_field() -> None:
    """An unknown key in a `local:` block is a one-line error before anything starts."""
    data = {"scale_groups": [{"name": "g", "platform": "local", "max_slices": 1,
                              "resources": {"cpu": 1, "memory": "1g"}, "local": {"max_host": 2}}]}  # fmt: skip
    with pytest.raises(ValueError, match=r"scale_groups\[0\]\.local\.max_host: unknown key; did you mean 'max_hosts'"):
        autoscaler_config(parse_config(data, "test"))
