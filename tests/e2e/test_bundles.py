"""A job's code bundle and setup step on real workers (process runtime): the directory travels, its
requirements are installed once per job and host by the setup commands, and the task imports both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iris import IrisClient, JobState, ResourceSpec
from tests.support import Cluster

ON_CPU = ResourceSpec(cpu=0.5, memory="512m", replicas=2)


def _project(root: Path) -> Path:
    """A user's project: a local module, and a requirement (a tiny package) the workers do not have."""
    project = root / "project"
    (project / "wheels").mkdir(parents=True)
    (project / "helper.py").write_text("def greet(name):\n    return f'hello {name} from the bundle'\n")
    package = root / "tinypkg"
    (package / "tinypkg").mkdir(parents=True)
    (package / "tinypkg" / "__init__.py").write_text("VALUE = 42\n")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "1.0"\n'
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
         str(project / "wheels"), str(package)],
        check=True, capture_output=True,
    )  # fmt: skip
    (project / "requirements.txt").write_text("tinypkg\n")
    return project


SETUP = (
    f"{sys.executable} -m venv --system-site-packages .venv && "
    ".venv/bin/pip install -q --no-index --find-links wheels -r requirements.txt && echo setup-ran"
)
TASK = "import helper, tinypkg, os; print(helper.greet(os.environ['IRIS_TASK_INDEX']), tinypkg.VALUE)"


def test_a_command_runs_in_its_bundle_after_the_setup_step(
    cluster: Cluster, client: IrisClient, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    job = client.submit_command([".venv/bin/python", "-c", TASK], resources=ON_CPU, bundle=project, setup=SETUP)
    assert JobState.SUCCEEDED == job.wait(timeout=180, raise_on_failure=False).state, job.status()
    for i in range(2):
        logs = client.fetch_task_logs(job.job_id, i)
        assert f"hello {i} from the bundle 42" in logs, logs


def test_a_failing_setup_fails_the_task_saying_so(client: IrisClient, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    job = client.submit_command(["true"], resources=ResourceSpec(cpu=0.5, memory="256m"), bundle=project,
                                setup="exit 3")  # fmt: skip
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.FAILED == status.state
    (task,) = client.list_tasks(job.job_id)
    assert "the job's setup failed (exit code 3)" in task.error, task


def test_bad_bundles_are_refused_at_submit(client: IrisClient, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^bundle: .* is not a directory"):
        client.submit_command(["true"], bundle=tmp_path / "missing")
    with pytest.raises(ValueError, match=r"^setup: needs a bundle"):
        client.submit_command(["true"], setup="pip install x")
    with pytest.raises(ValueError, match=r"^setup\[0\]"):
        client.submit_command(["true"], bundle=tmp_path, setup=[""])
