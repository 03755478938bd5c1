"""`iris.preemption_notice()`: a task asks whether its host is about to be taken away.

Why: SIGTERM is one way to learn of a preemption; a training loop often prefers to look between
steps. Both come from the same source: the agent makes the task's `IRIS_PREEMPTION_NOTICE_FILE`
appear (a cloud's preemption or maintenance notice for the host, or an eviction for higher-band
work) just before it sends SIGTERM, so a program handles every kind of stop one way.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from worker_agent.preemption import NOTICE_FILE_ENV

POLL_SECONDS = 0.05  # how often `wait` looks for the file (a stat: cheap)


class PreemptionNotice:
    """Like a `threading.Event` that only the agent sets: `is_set()` and `wait(timeout)`.

    Outside an Iris task (no `IRIS_PREEMPTION_NOTICE_FILE`) it is never set.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None

    def is_set(self) -> bool:
        """Whether a notice came for this task's host (the notice file exists)."""
        return self.path is not None and self.path.exists()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a notice comes or `timeout` seconds pass (None: for ever); whether it came."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(POLL_SECONDS if left is None else min(POLL_SECONDS, left))
        return True

    def reason(self) -> str:
        """What the notice said (e.g. `GCP preemption notice (instance/preempted=TRUE)`); "" before one."""
        try:
            return self.path.read_text().strip() if self.path is not None else ""
        except OSError:
            return ""

    def __repr__(self) -> str:
        return f"PreemptionNotice(path={str(self.path) if self.path else None!r}, set={self.is_set()})"


def preemption_notice() -> PreemptionNotice:
    """The current task's preemption notice (from `IRIS_PREEMPTION_NOTICE_FILE`)."""
    return PreemptionNotice(os.environ.get(NOTICE_FILE_ENV))
