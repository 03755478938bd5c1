"""Iris's state directory on this machine: the one answer for the local cluster, the agent and SSH."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["iris_home"]


def iris_home() -> Path:
    """`$IRIS_HOME`, else `~/.iris`."""
    return Path(os.environ.get("IRIS_HOME") or "~/.iris").expanduser()
