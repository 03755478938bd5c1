"""Iris as a library: its log lines go to stderr, never into the output of the program that imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_program_importing_iris_keeps_its_stdout_to_itself() -> None:
    """A script printing JSON for another program to read: Iris's events (here the one `terminate` of a job
    tree logs) reach stderr, one line, and stdout holds only what the script printed."""
    script = (
        "import iris, json\n"
        "from activities.job_tree import log\n"
        "log.info('job_tree.killed_descendants', job_id='j', killed=1)\n"
        "print(json.dumps({'ok': True}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert 0 == done.returncode, done.stderr
    assert '{"ok": true}\n' == done.stdout
    assert "job_tree.killed_descendants" in done.stderr
