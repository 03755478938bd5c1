"""The documentation stays a short user's guide plus a site that builds: no broken link, no stale page.

The README opens with the two Quickstart commands (CI runs the second as written there); the rest
lives in docs/, built by MkDocs in strict mode, which fails on a missing page or anchor.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from iris.config.cluster_file import parse_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 400
SITE_PACKAGES = ("mkdocs", "material", "mkdocs_include_markdown_plugin")

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def relative_links(page: Path) -> list[str]:
    """The link targets of a Markdown page that point into the repository (no URL, no bare anchor)."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_readme_opens_with_the_quickstart() -> None:
    """The README's first section is the Quickstart: the run command, then the test command CI extracts."""
    lines = README.read_text().splitlines()
    headings = [line for line in lines if line.startswith("#")]
    assert ["# Iris", "## Quickstart"] == headings[:2]
    assert [] == [line for line in lines[1 : lines.index("## Quickstart")] if line.strip()]
    run, test = lines.index("<!-- run-command -->"), lines.index("<!-- test-command -->")
    assert run < test < lines.index(headings[2])
    assert "```bash" == lines[run + 1] and lines[run + 2].startswith("pip install -e . && iris run ")
    # .ci/run takes the second line after the marker (awk: getline; getline; print) and runs it.
    assert "```bash" == lines[test + 1] and "python -m pytest" in lines[test + 2]
    assert "pip install -e '.[test]'" in lines[test + 2]


def test_readme_stays_a_short_guide() -> None:
    """Measurements and history go to docs/: the README stays under its line budget."""
    count = len(README.read_text().splitlines())
    assert count <= MAX_README_LINES, f"README.md has {count} lines; move reference material into docs/"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    """Each relative link (and image) of README.md and docs/ names a file or directory that exists."""
    broken = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert [] == broken


def test_the_test_extra_installs_the_site_builder() -> None:
    """The README's test command installs `.[test]`, which brings MkDocs, so CI can build the site."""
    text = (ROOT / "pyproject.toml").read_text()
    test_extra = text[text.index("\ntest = [") : text.index("]\n", text.index("\ntest = ["))]
    assert "mkdocs-material" in test_extra and "mkdocs-include-markdown-plugin" in test_extra


def test_the_configuration_example_loads() -> None:
    """The example at the top of docs/configuration.md is a valid config, with the groups it shows."""
    block = re.search(r"```yaml\n(.*?)```", (DOCS / "configuration.md").read_text(), re.S)
    assert block is not None
    config = parse_config(yaml.safe_load(block[1]), "docs/configuration.md")
    assert ["cpu", "slice-a", "boxed"] == [g.name for g in config.worker_groups]
    assert ["tpu-v5e-16"] == [g.name for g in config.scale_groups]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` passes: every page in the nav exists, every link and anchor resolves."""
    missing = [name for name in SITE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        message = f"the docs site needs {', '.join(missing)} (pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert 0 == result.returncode, result.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists()
