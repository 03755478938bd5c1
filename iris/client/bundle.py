"""The job's code bundle: a directory zipped on the submitter's machine, unpacked on every worker.

Like Ray's `working_dir` or SkyPilot's `workdir`: the bundle becomes the task's
working directory and is importable, so a job's own code, data files and
requirements travel with it. The zip is content-addressed in the blob store
(`bundles/<sha256>.zip`), so submitting the same tree again uploads nothing;
only its key travels through Temporal.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

MAX_BUNDLE_BYTES = 100 << 20  # zipped; a bigger tree belongs in an image or the store
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache",
                          ".pytest_cache", ".ruff_cache", ".tox"})  # fmt: skip
SKIPPED_SUFFIXES = (".pyc", ".pyo")
BUNDLE_PREFIX = "bundles/"


def zip_bundle(directory: str | os.PathLike[str]) -> tuple[str, bytes]:
    """(blob key, zip bytes) of `directory`; ValueError naming `bundle` when it cannot be shipped."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise ValueError(f"bundle: {str(directory)!r} is not a directory")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(_files(root)):
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (path.stat().st_mode & 0o777) << 16  # keep scripts executable
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
            if buffer.tell() > MAX_BUNDLE_BYTES:
                raise ValueError(
                    f"bundle: {str(directory)!r} is over {MAX_BUNDLE_BYTES >> 20} MiB zipped; "
                    "put large files in an image or the store"
                )
    data = buffer.getvalue()
    return f"{BUNDLE_PREFIX}{hashlib.sha256(data).hexdigest()}.zip", data


def _files(root: Path) -> list[Path]:
    out = []
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        out += [Path(base) / f for f in files if not f.endswith(SKIPPED_SUFFIXES) and (Path(base) / f).is_file()]
    return out


def setup_commands(setup: str | Sequence[str] | None) -> list[str]:
    """The setup step as a list of shell commands; ValueError naming `setup`."""
    if setup is None:
        return []
    commands = [setup] if isinstance(setup, str) else list(setup)
    for i, cmd in enumerate(commands):
        if not isinstance(cmd, str) or not cmd.strip() or "\0" in cmd:
            raise ValueError(f"setup[{i}] must be a non-empty shell command, got {cmd!r}")
    return commands
