"""What an agent is told when it starts (`iris worker serve`'s options, a slice's bootstrap): `AgentConfig`,
checked where it is built, so a bad value is refused before anything is reached."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activities.contracts import DEFAULT_PORT_RANGE
from worker_agent.leases.lease_settings import LeaseSettings
from worker_agent.registration import ANSWER_WAIT_SECONDS

KILL_GRACE_SECONDS = 5.0  # a killed task's SIGTERM to SIGKILL, by default (`AgentConfig.kill_grace_seconds`)
MAX_KILL_GRACE_SECONDS = 300.0


@dataclass
class AgentConfig:
    worker_id: str
    store_url: str
    cpu_millis: int
    memory_bytes: int
    gpus: int = 0
    tpus: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    runtime: str = "process"
    state_dir: Path | None = None  # where running task process groups are recorded
    task_dir: Path | None = None  # root of the tasks' own directories (default: beside state_dir)
    default_image: str = ""  # container image for jobs that name none
    address: str = ""  # how other hosts reach this host's tasks ("" = the host's own address)
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE  # ports the scheduler may give this worker's tasks
    # What a task needs to reach this cluster (iris.client.task_connection): Temporal, store, key files by path;
    # and the files those variables name, mounted read-only into container tasks at the same paths.
    cluster_env: dict[str, str] = field(default_factory=dict)
    task_api: str = ""  # team mode: tasks reach this Iris API with their job's token (worker_agent/task_token.py)
    cluster_files: list[str] = field(default_factory=list)
    # Watch the GCE metadata server for a preemption or maintenance notice (None: when $GCE_METADATA_HOST
    # is set); on one, every task gets SIGTERM and at least `notice_grace_seconds` before the SIGKILL.
    watch_notices: bool | None = None
    notice_grace_seconds: float = 30.0
    # How long an attempt outlives this agent's last heartbeat Temporal recorded (docs/reliability.md).
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    # How long a registration waits for the scheduler's answer before it is sent again (idempotent).
    registration_answer_wait_seconds: float = ANSWER_WAIT_SECONDS
    # A task killed here (`iris job kill`, a failed gang, the agent stopping) gets SIGTERM, then SIGKILL this many
    # seconds later if its process group still runs (0 to MAX_KILL_GRACE_SECONDS).
    kill_grace_seconds: float = KILL_GRACE_SECONDS

    def __post_init__(self) -> None:
        wait = self.registration_answer_wait_seconds
        if not wait >= 1:
            raise ValueError(f"registration_answer_wait_seconds: must be at least 1 second, got {wait}")
        grace = self.kill_grace_seconds
        if not 0 <= grace <= MAX_KILL_GRACE_SECONDS:
            raise ValueError(f"kill grace (--kill-grace, IRIS_KILL_GRACE_SECONDS): must be at least 0 and at most "
                             f"{MAX_KILL_GRACE_SECONDS:g} seconds, got {grace}")  # fmt: skip
