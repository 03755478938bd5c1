"""docker-compose.yml and the Dockerfiles, checked as files: the stack is wired the way docs/operators.md says."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from iris.deploy.build import IMAGES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def test_the_stack_has_temporal_on_postgres_ui_setup_controller_and_two_workers() -> None:
    """The services a deployment needs are all there, and Temporal's database is Postgres."""
    assert {"postgres", "temporal", "temporal-ui", "iris-setup", "controller", "worker-1", "worker-2"} == set(SERVICES)
    assert "postgres" in SERVICES["temporal"]["environment"]["DB"]
    assert ["temporal", "setup"] == SERVICES["iris-setup"]["command"]
    assert "no" == SERVICES["iris-setup"]["restart"]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_health_check(name: str) -> None:
    """Each service declares a health check with a command."""
    test = SERVICES[name]["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL") and len(test) >= 2


def test_start_order_waits_on_health_not_on_start() -> None:
    """depends_on uses conditions: Temporal waits for a healthy Postgres, the controller for setup to succeed,
    workers for a healthy controller."""
    expected = {
        "temporal": {"postgres": "service_healthy"},
        "temporal-ui": {"temporal": "service_healthy"},
        "iris-setup": {"temporal": "service_healthy"},
        "controller": {"iris-setup": "service_completed_successfully"},
        "worker-1": {"controller": "service_healthy"},
        "worker-2": {"controller": "service_healthy"},
    }
    actual = {
        name: {dep: cond["condition"] for dep, cond in service["depends_on"].items()}
        for name, service in SERVICES.items() if "depends_on" in service
    }
    assert expected == actual


def test_ports_and_volumes() -> None:
    """Temporal, the UI, the controller's health port and its dashboard are published; the store and Postgres
    data are volumes shared where they must be."""
    published = {name: [p.split(":")[-1] for p in s.get("ports", [])] for name, s in SERVICES.items()}
    assert ["7233"] == published["temporal"] and ["8080"] == published["temporal-ui"]
    assert ["8080", "8081"] == published["controller"]
    for name in ("controller", "worker-1", "worker-2"):
        assert "store:/var/iris" in SERVICES[name]["volumes"]
    assert {"pgdata", "store"} == set(COMPOSE["volumes"])
    for name in ("controller", "worker-1", "worker-2", "iris-setup"):
        assert "temporal:7233" == SERVICES[name]["environment"]["IRIS_TEMPORAL_ADDRESS"]


def test_every_build_has_its_dockerfile_and_images_are_the_ones_iris_build_makes() -> None:
    """Each `build:` names a Dockerfile that exists, and the image it tags is one `iris build` builds."""
    builds = {name: s["build"] for name, s in SERVICES.items() if "build" in s}
    assert {"iris-setup", "controller", "worker-1", "worker-2"} == set(builds)
    for name, build in builds.items():
        assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        image = SERVICES[name]["image"].split(":")[0]
        assert build["dockerfile"] == IMAGES[image]


def test_dockerfiles_copy_only_what_exists_and_the_env_example_covers_the_variables() -> None:
    """Every COPY source exists in the build context; every ${VAR} the compose file uses without a default is in
    .env.example."""
    for dockerfile in IMAGES.values():
        for line in (ROOT / dockerfile).read_text().splitlines():
            if line.startswith("COPY "):
                for source in line.split()[1:-1]:
                    assert (ROOT / source).exists(), (dockerfile, source)
    text = (ROOT / "docker-compose.yml").read_text()
    example = {line.split("=", 1)[0] for line in (ROOT / ".env.example").read_text().splitlines()
               if line and not line.startswith("#")}
    used = set(re.findall(r"\$\{(\w+)", text))
    assert used <= example | {"TEMPORAL_VERSION", "TEMPORAL_UI_VERSION", "TEMPORAL_CODEC_ENDPOINT"}


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    """`docker-compose config` (Debian's docker-compose) parses and resolves the file."""
    binary = shutil.which("docker-compose")
    if binary is None:
        from tests.support import missing_engine

        missing_engine("docker-compose is not installed (tests/setup-engines.sh installs it)")
    project = tmp_path / "project"
    shutil.copytree(ROOT / "infra", project / "infra")
    shutil.copy(ROOT / "docker-compose.yml", project / "docker-compose.yml")
    shutil.copy(ROOT / ".env.example", project / ".env")
    done = subprocess.run([str(binary), "config", "--quiet"], cwd=project, capture_output=True, text=True, timeout=120)
    assert 0 == done.returncode, done.stderr
