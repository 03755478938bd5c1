"""What a task and the `iris` command load before they need it (docs/performance.md, "What a task pays to import Iris").

A task reading its identity (`from iris import get_job_info`) once imported the client, the Temporal SDK and
structlog: half a second of CPU per task, ten times that at 0.1 cpu. `iris --help` imported them too. These
check the modules loaded, not the time (no timed unit tests): a top-level import of the client in the wrong
module brings the cost back, and fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import command_imports

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("temporalio", "structlog", "iris.client.iris_client", "iris.client.async_client", "workflows.jobs",
         "workflows.scheduler")


def loaded_after(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The `heavy` modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith({heavy!r}))))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert 0 == done.returncode, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_a_task_reading_its_identity_loads_neither_the_client_nor_the_sdk() -> None:
    assert [] == loaded_after("from iris import get_job_info, ResourceSpec, JobState\nget_job_info()")


def test_the_public_api_still_gives_the_client_when_asked() -> None:
    """The exports are loaded on first use, and are what they were; `IrisClient` itself loads no SDK (a team-mode
    client never needs it: tests/auth/test_team_mode.py), `AsyncIrisClient` does."""
    loaded = loaded_after("import iris\nfrom iris.client.iris_client import IrisClient\n"
                          "assert iris.IrisClient is IrisClient")
    assert "iris.client.iris_client" in loaded and "temporalio" not in loaded
    loaded = loaded_after("import iris\nfrom iris.client.async_client import AsyncIrisClient\n"
                          "assert iris.AsyncIrisClient is AsyncIrisClient is iris.client.AsyncIrisClient")
    assert "temporalio" in loaded


def imported_by_command(*args: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The `heavy` modules `iris ARGS` imports from start to exit, with no cluster."""
    with tempfile.TemporaryDirectory() as home:
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "IRIS_HOME": home}
        done, names = command_imports(args, env, cwd=ROOT)
    assert names, done.stderr
    return sorted({m for m in names if m.startswith(heavy)})


def test_a_refused_run_loads_no_sdk() -> None:
    """`iris run` checks every option before it connects; the checks imported the job workflow for its size
    limits and the SDK for the job-control options (~0.3 s of CPU of every refused `iris run`)."""
    sdk = ("temporalio", "workflows.jobs.job_workflow")
    for args in (["--replicas", "0"], ["--env", "IRIS_X=1"], ["--name", "x", "--if-exists", "bogus"]):
        assert [] == imported_by_command("run", *args, "--", "true", heavy=sdk)


def test_every_export_is_listed_once_and_resolves() -> None:
    """`__all__` and the lazy table name the same exports, each of which imports (one list edited alone fails)."""
    import iris

    assert sorted(iris.__all__) == sorted(iris._EXPORTS)
    assert all(getattr(iris, name) is not None for name in iris.__all__)


def test_the_iris_command_loads_the_sdk_only_to_connect() -> None:
    """Registering every subcommand (what `iris --help` and a refused command pay) imports no client, no SDK,
    no structlog and no asyncio."""
    assert [] == loaded_after("import iris.cli.main", (*HEAVY, "asyncio"))


def test_a_command_that_logs_nothing_loads_no_structlog() -> None:
    """structlog is configured when something first imports it, not as the command starts (~0.04 s of CPU with
    the asyncio it imports): `iris --help` and a refused `iris run` never log."""
    for args in (["--help"], ["run", "--replicas", "0", "--", "true"]):
        assert [] == imported_by_command(*args, heavy=("structlog", "asyncio"))


def test_structlog_imported_later_is_configured_as_at_start() -> None:
    """An event logged after the first `import structlog` goes to stderr, warnings only, as when it was configured
    at start (structlog's own defaults print every event to stdout)."""
    code = ("from iris.cli.logging_config import configure_logging_on_import\nconfigure_logging_on_import(json=False)\n"
            "import structlog\nstructlog.get_logger().info('hidden')\nstructlog.get_logger().warning('shown')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert ("", ["[warning  ] shown"]) == (done.stdout, [line.partition(" ")[2] for line in done.stderr.splitlines()])


def test_registering_the_commands_loads_no_connection_settings_and_no_store() -> None:
    """`iris --help` and every refused command register all subcommands: the connection settings (pydantic's
    settings, ~0.1 s of CPU) and the store's fsspec and cryptography (daemon logs) load when a command uses them."""
    later = ("iris.connection", "pydantic_settings", "worker_agent.object_store", "fsspec", "cryptography")
    assert [] == [m for m in loaded_after("import iris.cli.main", later) if m != "iris.connection_env"]


def test_an_agent_loads_no_controller_and_the_supervisor_no_sdk() -> None:
    """A local cluster starts eight daemons at once: an agent imported the whole control plane (every workflow,
    the dashboard, aiohttp) for its connect helper, and the supervisor the CLI and the SDK (~0.3 s of CPU each)."""
    agent = ("import iris.cli.main, iris.cli.daemon_commands, worker_agent.agent, iris.security.key_check\n"
             "from iris.connection import TemporalSettings\nTemporalSettings.connect_until_up")  # fmt: skip
    controller = ("iris.controller.control_plane", "iris.dashboard", "aiohttp", "workflows.scheduler")
    assert [] == loaded_after(agent, controller)
    assert [] == loaded_after("import iris.local.supervisor", ("temporalio", "iris.cli.main", "iris.controller"))


def test_finding_the_local_cluster_loads_no_config_schema() -> None:
    """Every command against the local cluster reads its record for the address; the record does not need the
    cluster file's pydantic schema (~65 ms of each command's start until 2026-12-06)."""
    assert [] == loaded_after("import iris.local.record", ("iris.config.cluster_file", "iris.config.sharing"))


def test_a_command_finding_no_cluster_loads_no_process_or_store_machinery() -> None:
    """Without a cluster recorded, a read command stops at the record: the processes' psutil and the store's
    fsspec and cryptography (a team-mode token's module) are for a cluster that is there (~0.1 s of CPU)."""
    later = ("temporalio", "structlog", "psutil", "fsspec", "cryptography", "worker_agent.object_store")
    assert [] == imported_by_command("job", "status", "nosuch-1234", heavy=later)
