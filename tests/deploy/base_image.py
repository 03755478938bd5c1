"""An offline base image for building Iris's images in tests: this interpreter, /bin/sh and Iris's dependencies.

No registry is reachable from the test machine, so `python:3.11-slim` cannot be pulled. This base
holds what the Dockerfiles' `BASE_IMAGE` is expected to provide: a Python 3.11 (this one, at its
real path, with `/usr/local/bin/python3` linking to it), a shell for `RUN`, and the site-packages
the daemons import (found by importing them in a subprocess), on `PYTHONPATH`. The Dockerfiles are
then built unchanged with `PIP_INSTALL=true`.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

from benchmarks.engines import (
    _ARCH,
    _IMAGE_PYTHON,
    _STDLIB_SKIP,
    _add_bytes,
    _Layer,
    _needed_libraries,
)

BASE_IMAGE = "iris.test/base:local"
# What the controller and the agent import, so their distributions go into the base. Cloud platforms
# (kubernetes, google-cloud-tpu, asyncssh) are imported only when a scale group uses them: left out.
DAEMON_MODULES = (
    "iris.cli.main", "iris.controller.control_plane", "iris.controller.observability", "iris.security.codec",
    "iris.security.codec_server", "iris.deploy.temporal_setup",
    "worker_agent.agent", "worker_agent.runtimes.select", "worker_agent.object_store", "worker_agent.task_runner",
    "aiohttp.web", "click",
)  # fmt: skip
_SCRIPT = """
import importlib, sys, json
for name in sys.argv[1:]:
    importlib.import_module(name)
roots = [p for p in sys.path if p.endswith("site-packages")]
found = set()
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    for root in roots:
        if path.startswith(root + "/"):
            found.add((root, path[len(root) + 1:].split("/")[0]))
print(json.dumps(sorted(found)))
"""


def daemon_site_packages() -> tuple[Path, list[Path]]:
    """The site-packages directory and the entries in it the daemons import (plus all distribution metadata)."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *DAEMON_MODULES], capture_output=True, text=True,
                          check=True, timeout=120)
    pairs = json.loads(done.stdout)
    root = Path(pairs[0][0])
    entries = {root / name for _, name in pairs if not name.startswith("__editable__")}
    entries |= set(root.glob("*.dist-info"))
    return root, sorted(entries)


def write_base_image(target: Path) -> Path:
    """A docker-archive holding BASE_IMAGE."""
    python = Path(sys.executable).resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    shell = Path("/bin/sh")
    site, entries = daemon_site_packages()
    shared = [p for e in entries if e.is_dir() for p in e.rglob("*.so")] + [e for e in entries if e.suffix == ".so"]
    dynload = list((stdlib / "lib-dynload").glob("*.so"))
    with tarfile.open(target.with_suffix(".layer.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        layer = _Layer(tar)
        for name, mode in (("/tmp", 0o1777), ("/proc", 0o555), ("/sys", 0o555), ("/dev", 0o755), ("/etc", 0o755)):
            layer.add_dir(name, mode)
        data = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        for path in [python, shell, *sorted(_needed_libraries([python, shell.resolve(), *dynload, *shared]))]:
            layer.add_path(path)
        layer.add_tree(stdlib, _STDLIB_SKIP)
        layer.add_path(Path("/usr/local/bin"))
        if _IMAGE_PYTHON not in layer.added:
            layer.add_symlink(_IMAGE_PYTHON, str(python))
        for entry in entries:
            if entry.is_dir():
                layer.add_tree(entry, frozenset({"__pycache__", "tests"}))
            else:
                layer.add_path(entry)
    layer_path = target.with_suffix(".layer.tar")
    digest = hashlib.sha256()
    with open(layer_path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    diff_id = digest.hexdigest()
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"PYTHONPATH={site}"]
    config = json.dumps({
        "architecture": _ARCH, "os": "linux", "config": {"Env": env, "Cmd": [_IMAGE_PYTHON]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "iris tests: base_image.write_base_image"}],
    }).encode()  # fmt: skip
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    with tarfile.open(target, "w") as archive:
        archive.add(str(layer_path), arcname=f"{diff_id}/layer.tar")
        _add_bytes(archive, config_name, config)
        manifest = [{"Config": config_name, "RepoTags": [BASE_IMAGE], "Layers": [f"{diff_id}/layer.tar"]}]
        _add_bytes(archive, "manifest.json", json.dumps(manifest).encode())
    layer_path.unlink()
    return target
