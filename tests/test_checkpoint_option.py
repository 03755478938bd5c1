"""`checkpoint_dir=` / `iris run --checkpoint-dir`: validated at submit, carried in the job's env, not inherited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iris.client.child_jobs import inherit
from iris.client.submission import build_request

ROOT = Path(__file__).resolve().parents[1]


def test_the_root_travels_in_the_jobs_env(tmp_path: Path) -> None:
    """A path becomes absolute, a file:// URL a path, an object store's URL stays; the agent appends the task."""
    assert str(tmp_path / "ck") == build_request(checkpoint_dir=tmp_path / "ck").env["IRIS_CHECKPOINT_DIR"]
    assert str(tmp_path) == build_request(checkpoint_dir=f"file://{tmp_path}/").env["IRIS_CHECKPOINT_DIR"]
    assert "s3://bucket/run" == build_request(checkpoint_dir="s3://bucket/run/").env["IRIS_CHECKPOINT_DIR"]
    assert "IRIS_CHECKPOINT_DIR" not in build_request().env
    with pytest.raises(ValueError, match=r"^checkpoint_dir must be a non-empty path or URL"):
        build_request(checkpoint_dir=3)
    # file://localhost/ is the same file URL (RFC 8089), and %20 is a space; a query would swallow the task.
    assert "/tmp/ck sp" == build_request(checkpoint_dir="file://localhost/tmp/ck%20sp").env["IRIS_CHECKPOINT_DIR"]
    with pytest.raises(ValueError, match=r"has a query or fragment"):
        build_request(checkpoint_dir="s3://bucket/x?versionId=3")


def test_a_child_does_not_inherit_its_parents_checkpoints(tmp_path: Path) -> None:
    """A child job's tasks would overwrite the parent's task i checkpoints: it keeps only its own root."""
    parent = build_request(env={"A": "1"}, checkpoint_dir=tmp_path / "parent")
    child = build_request()
    inherit(child, parent, dict(parent.env), frozenset())
    assert {"A": "1"} == dict(child.env)
    own = build_request(checkpoint_dir=tmp_path / "child")
    inherit(own, parent, dict(parent.env), frozenset({"checkpoint_dir"}))
    assert str(tmp_path / "child") == own.env["IRIS_CHECKPOINT_DIR"]


def test_cli_names_the_flag() -> None:
    """A bad --checkpoint-dir is one line on stderr naming the flag, exit 2, before anything connects."""
    run = subprocess.run([sys.executable, "-m", "iris", "run", "--checkpoint-dir", "file://host/x", "--", "true"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)  # fmt: skip
    assert 2 == run.returncode
    assert ["error: --checkpoint-dir: a file:// URL must name an absolute path on the workers, got 'file://host/x'"] \
        == run.stderr.strip().splitlines()  # fmt: skip
