"""The configuration reference of the platform blocks is generated from their models and cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.config.cluster_file import platform_settings_model
from iris.config.file_keys import SECTIONS, WORDS
from iris.config.reference import FILE_END, FILE_START, PLATFORMS, file_reference, reference, rows, section

CONFIGURATION = Path(__file__).parents[2] / "docs" / "configuration.md"


def test_operators_guide_holds_the_generated_reference() -> None:
    """docs/configuration.md has exactly what the models say (regenerate: python -m iris.config.reference --write)."""
    assert reference() == section(CONFIGURATION.read_text())


def test_configuration_holds_the_generated_file_keys() -> None:
    """docs/configuration.md lists the config file's own keys exactly as the models that read the file have them."""
    assert file_reference() == section(CONFIGURATION.read_text(), FILE_START, FILE_END)


def test_every_file_key_is_described() -> None:
    """Every field of the file's models has words in iris/config/file_keys.py, and no words describe a lost field."""
    fields = {(model, name) for _, model, _ in SECTIONS for name in model.model_fields}
    assert fields == set(WORDS)
    assert [] == [key for key, (_, words) in WORDS.items() if not words]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_key_is_documented(platform: str) -> None:
    """Every field of a platform block's model is a row of the reference, with a description."""
    model = platform_settings_model(platform)
    assert model is not None
    documented = {key: description for key, _, _, description in rows(model)}
    assert set(model.model_fields) <= set(documented)
    assert [] == [key for key, description in documented.items() if not description]


def test_the_keys_an_outside_user_missed_are_there() -> None:
    """The keys a first CoreWeave and GCP user went looking for are in the reference, with their defaults."""
    text = section(CONFIGURATION.read_text())
    for row in ("| `host_dir` | string | `/var/lib/iris` |", "| `health_port` | integer | 8081 |",
                "| `poll_interval` | seconds (or `30s`, `20m`, `1h`) | 10 |", "| `worker_command` | string | null |",
                "| `env` | map of strings | {} |", "| `ssh.port` | integer | 22 |"):  # fmt: skip
        assert row in text
