"""What a task needs in its environment to reach its own cluster: `IrisClient.connect()` with no arguments.

In team mode (the agent's `--task-api`), a task gets only the Iris API's address and its job's token
(`task_api_env`). Otherwise the worker agent adds these variables to every task's environment: the Temporal address and
namespace, TLS material and the API key *by reference* (file paths: a secret never sits inline in
a task's environment, where `/proc/<pid>/environ`, logs and bug reports would show it), the codec
key by reference when the cluster encrypts, and the store's URL. A secret the agent itself was given
inline (`IRIS_TEMPORAL_API_KEY`, `IRIS_CODEC_KEY`) is written once to a file only the agent's user
can read, and that file is what tasks are given.

Inside a task (IRIS_JOB_ID is set) the client never starts an embedded cluster: without these
variables it says so in one line (`require_cluster_address`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from iris.connection import TemporalSettings
from iris.connection_env import ADDRESS_ENV, ENV_PREFIX, STORE_ENV, is_api_url
from worker_agent.encryption import KEY_ENV, KEY_FILE_ENV

JOB_ENV = "IRIS_JOB_ID"


def _secret_file(directory: Path, name: str, value: str) -> Path:
    """`value` in `directory/name`, readable by its owner only (rewritten if it changed)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / name
    if not path.exists() or path.read_text() != value:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value)
    return path


def task_cluster_env(
    settings: TemporalSettings, store_url: str, secrets_dir: Path, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables every task of this agent gets so that it reaches the agent's own cluster.

    `environ` (default: the agent's environment) is where the codec key is read from.
    """
    env = os.environ if environ is None else environ
    if settings.address is None:
        raise ValueError(f"{ADDRESS_ENV}: the agent has no Temporal address to give its tasks")
    out = {ADDRESS_ENV: settings.address, f"{ENV_PREFIX}NAMESPACE": settings.namespace, STORE_ENV: store_url}
    if settings.tls is not None:
        out[f"{ENV_PREFIX}TLS"] = "true" if settings.tls else "false"
    for name in ("tls_ca", "tls_cert", "tls_key"):
        path = getattr(settings, name)
        if path is not None:
            out[f"{ENV_PREFIX}{name.upper()}"] = str(path.resolve())
    if settings.tls_server_name:
        out[f"{ENV_PREFIX}TLS_SERVER_NAME"] = settings.tls_server_name
    if settings.api_key_file is not None and settings.api_key is None:
        out[f"{ENV_PREFIX}API_KEY_FILE"] = str(settings.api_key_file.resolve())
    elif settings.api_key is not None:
        path = _secret_file(secrets_dir, "temporal-api-key", settings.api_key.get_secret_value())
        out[f"{ENV_PREFIX}API_KEY_FILE"] = str(path)
    if env.get(KEY_FILE_ENV):
        out[KEY_FILE_ENV] = str(Path(env[KEY_FILE_ENV]).expanduser().resolve())
    elif env.get(KEY_ENV):
        out[KEY_FILE_ENV] = str(_secret_file(secrets_dir, "codec-key", env[KEY_ENV].strip()))
    return out


def task_api_env(api_url: str) -> dict[str, str]:
    """Team mode: a task gets the Iris API's address and nothing that opens Temporal (no address, TLS files,
    API key, codec key or store); the agent adds its job's token file to each attempt (worker_agent/task_token.py).
    """
    if not is_api_url(api_url):
        raise ValueError(f"--task-api: the Iris API's URL (http://HOST:PORT), got {api_url!r}")
    return {ADDRESS_ENV: api_url}


def referenced_files(cluster_env: Mapping[str, str]) -> list[str]:
    """The files `cluster_env` names (a container task must see them at the same paths)."""
    names = (*(f"{ENV_PREFIX}{n}" for n in ("TLS_CA", "TLS_CERT", "TLS_KEY", "API_KEY_FILE")), KEY_FILE_ENV)
    return [cluster_env[n] for n in names if cluster_env.get(n)]


def task_parent(address: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The job a client's submissions are children of: the task's job, when it talks to the task's cluster.

    "" outside a task, or for a client connected to another cluster than the task's own.
    """
    env = os.environ if environ is None else environ
    job_id = env.get(JOB_ENV, "")
    return job_id if job_id and address is not None and address == env.get(ADDRESS_ENV) else ""


def require_cluster_address(environ: Mapping[str, str] | None = None) -> None:
    """Inside a task, refuse to start an embedded cluster: a task reaches its own cluster or none.

    ConnectionError (one line) when IRIS_JOB_ID is set but no Temporal address is: the worker that
    runs the task did not pass its cluster's address on (an agent older than job trees, or a
    container whose environment was replaced).
    """
    env = os.environ if environ is None else environ
    if env.get(JOB_ENV) and not env.get(ADDRESS_ENV):
        raise ConnectionError(
            f"inside task of job {env[JOB_ENV]} no cluster address is set ({ADDRESS_ENV}): "
            "a task reaches its own cluster, never a new embedded one; pass IrisClient.connect(ADDRESS)"
        )
