"""`iris cluster up --config` with a hostile file: exit 2, one line naming the file and the YAML path."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.local.cluster import LocalCluster

from .conftest import assert_one_line_error, iris

GROUP = "    - name: cpu\n      resources: {cpu: 1, memory: 1g}\n"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("", ["the config file is empty", "leave out --config"]),
        ("local:\n  worker_groups:\n    - name: cpu\n      resourcez: {cpu: 1, memory: 1g}\n",
         ["local.worker_groups[0].resourcez", "unknown key", "did you mean 'resources'?"]),
        ("locl: {}\n", ["locl", "did you mean 'local'?"]),
        ("local:\n  worker_groups:\n" + GROUP + "      count: 5000\n",
         ["local.worker_groups[0].count", "5000 local workers", "at most 64"]),
        ("local:\n  worker_groups:\n    - name: " + "g" * 5000 + "\n      resources: {cpu: 1, memory: 1g}\n",
         ["local.worker_groups[0].name", "1-63"]),
        ('local:\n  worker_groups:\n' + GROUP + '      attributes: {"a\\0b": 1}\n',
         ["local.worker_groups[0].attributes", "attribute key must be"]),
        ("local:\n  worker_groups:\n" + GROUP + "      count: two\n", ["count", "must be an integer >= 1"]),
        ("local: [unclosed\n", ["not valid YAML"]),
        ("- just\n- a list\n", ["(top level): must be a mapping, got a list"]),
        ("scale_groups:\n  - name: s\n    platform: coreweave\n    coreweave: {instance_typ: x, image: y}\n",
         ["scale_groups[0].coreweave.instance_typ", "unknown key", "did you mean 'instance_type'?"]),
        ("scale_groups:\n  - name: s\n    platform: aws\n", ["scale_groups[0].platform", "must be one of"]),
    ],
)
def test_bad_config_files_are_one_line_errors(
    no_cluster_env: dict[str, str], tmp_path: Path, text: str, fragments: list[str]
) -> None:
    """Each hostile config is refused before anything starts, naming the file and the field."""
    config = tmp_path / "cluster.yaml"
    config.write_text(text)
    result = iris("cluster", "up", "--config", str(config), env=no_cluster_env)
    assert_one_line_error(result, 2, str(config), *fragments)
    assert LocalCluster(no_cluster_env["IRIS_HOME"]).status() is None


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_unreadable_config_files_are_one_line_errors(no_cluster_env: dict[str, str], tmp_path: Path, kind: str) -> None:
    """A config path that is missing, a directory or not text is named in one line."""
    path = tmp_path / "cluster.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
    result = iris("cluster", "up", "--config", str(path), env=no_cluster_env)
    assert_one_line_error(result, 2, str(path))
