"""Throwaway container engines and images, for the test suite and the runtime benchmark.

Why in the package: tests and ``python -m benchmarks.runtimes`` both need a real
``dockerd`` and ``containerd`` that touch nothing of the host's own engines (their own data
root, state, socket and pidfile in a temporary directory) and an image to run, without a
registry. Both need root and the Debian ``docker.io`` / ``containerd`` packages.

- ``PrivateDockerd``: ``dockerd --iptables=false --bridge=none`` (tasks use host networking).
- ``PrivateContainerd``: ``containerd`` with the CRI plugin on, ``restrict_oom_score_adj``
  (a VM may refuse negative OOM scores) and no CNI (pods share the node's network).
- ``write_python_image``: a docker-archive holding a root filesystem with this interpreter
  (binary, standard library, shared libraries) and ``sleep``; tagged twice, as a Python image
  and as a stand-in sandbox ("pause") image whose entrypoint sleeps forever. ``docker load`` and
  ``ctr -n k8s.io images import`` both read it.

Stopping an engine also removes what it leaves behind: its containers (and their shims),
mounts under its directories and empty cgroup directories.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = [
    "PAUSE_IMAGE",
    "PYTHON_IMAGE",
    "EngineUnavailable",
    "PrivateContainerd",
    "PrivateDockerd",
    "write_python_image",
]

PYTHON_IMAGE: Final = "iris.test/python:local"
PAUSE_IMAGE: Final = "iris.test/pause:local"
_IMAGE_PYTHON: Final = "/usr/local/bin/python3"
_STDLIB_SKIP: Final = frozenset({"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"})
_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
_ARCH: Final = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


class EngineUnavailable(Exception):  # noqa: N818 - reads as a condition: "engine unavailable: ..."
    """The engine cannot run here (not installed, not root, failed to start); the message says why."""


def _require(binary: str) -> str:
    path = shutil.which(binary) or next(
        (str(p) for p in (Path("/usr/sbin") / binary, Path("/usr/bin") / binary) if p.exists()), None
    )
    if path is None:
        raise EngineUnavailable(f"{binary} is not installed (tests/setup-engines.sh installs it)")
    if os.geteuid() != 0:
        raise EngineUnavailable(f"{binary} needs root")
    return path


def _wait_for_socket(path: Path, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise EngineUnavailable(f"{Path(str(process.args[0])).name} exited: {log.read_text()[-2000:]}")  # type: ignore[index]
        if time.monotonic() > deadline:
            raise EngineUnavailable(f"no socket at {path} after {timeout:.0f}s; see {log}")
        time.sleep(0.05)


def _stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _unmount_under(*roots: Path) -> None:
    """Lazily unmount every mount point below ``roots`` (deepest first)."""
    prefixes = [str(r.resolve()) + "/" for r in roots]
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if any(target.startswith(p) for p in prefixes):
            points.append(target)
    for target in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def _remove_empty_cgroups(parent_names: Iterable[str]) -> None:
    """rmdir the (empty) cgroup directories engines leave under ``<controller>/<parent>``."""
    if not _CGROUP_ROOT.is_dir():
        return
    for controller in _CGROUP_ROOT.iterdir():
        for name in parent_names:
            top = controller / name
            if not top.is_dir() or top.is_symlink():
                continue
            nested = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for directory in nested:
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _kill_processes_mentioning(text: str) -> None:
    """SIGKILL processes whose command line holds ``text`` (an engine's leftover shims)."""
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)


class PrivateDockerd:
    """A ``dockerd`` of our own in ``base`` (data root, exec root, pidfile, socket); ``url`` to reach it."""

    def __init__(self, base: Path | None = None) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="iris-dockerd-")) if base is None else base
        self.socket = self.base / "docker.sock"
        self.log = self.base / "dockerd.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The engine's address for the docker SDK / ``docker -H``."""
        return f"unix://{self.socket}"

    def start(self, timeout: float = 60.0) -> PrivateDockerd:
        """Start dockerd and wait until it answers; EngineUnavailable if it cannot."""
        dockerd = _require("dockerd")
        argv = [
            dockerd, "--iptables=false", "--ip-masq=false", "--bridge=none",
            "--data-root", str(self.base / "data"), "--exec-root", str(self.base / "exec"),
            "--pidfile", str(self.base / "dockerd.pid"), "-H", self.url, "--log-level", "warn",
        ]  # fmt: skip
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        _wait_for_socket(self.socket, self._process, self.log, timeout)
        import docker

        deadline = time.monotonic() + timeout
        while True:
            try:  # the client asks the engine's version as it is made: the socket may exist before dockerd listens
                client = docker.APIClient(base_url=self.url, timeout=10)
                client.ping()
                break
            except Exception as exc:  # any failure means "not ready yet"
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise EngineUnavailable(f"dockerd did not answer: {exc}; see {self.log}") from exc
                time.sleep(0.1)
        client.close()
        return self

    def load(self, archive: Path) -> None:
        """``docker load`` an image archive."""
        import docker

        client = docker.APIClient(base_url=self.url, timeout=300)
        with open(archive, "rb") as data:
            for _ in client.load_image(data):
                pass
        client.close()

    def stop(self) -> None:
        """Remove all containers, stop dockerd, unmount and delete what it left."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(Exception):
                import docker

                client = docker.APIClient(base_url=self.url, timeout=30)
                for container in client.containers(all=True):
                    client.remove_container(container["Id"], force=True)
                client.close()
            _stop_process(self._process)
        _kill_processes_mentioning(str(self.base / "exec"))
        _unmount_under(self.base)
        _remove_empty_cgroups(["docker"])
        shutil.rmtree(self.base, ignore_errors=True)


_CONTAINERD_CONFIG: Final = """\
version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{base}/containerd.sock"

[ttrpc]
  address = "{base}/containerd.ttrpc.sock"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{base}/cni/bin"
    conf_dir = "{base}/cni/conf"
"""


class PrivateContainerd:
    """A ``containerd`` of our own in ``base`` with the CRI plugin; ``socket`` to reach it."""

    def __init__(self, base: Path | None = None, pause_image: str = PAUSE_IMAGE) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="iris-ctrd-")) if base is None else base
        self.socket = self.base / "containerd.sock"
        self.log = self.base / "containerd.log"
        self.pause_image = pause_image
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> PrivateContainerd:
        """Start containerd and wait for its socket; EngineUnavailable if it cannot."""
        containerd = _require("containerd")
        for sub in ("root", "state", "cni/bin", "cni/conf"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        config = self.base / "config.toml"
        config.write_text(_CONTAINERD_CONFIG.format(base=self.base, pause=self.pause_image))
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(
                [containerd, "--config", str(config), "--log-level", "warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        _wait_for_socket(self.socket, self._process, self.log, timeout)
        return self

    def import_image(self, archive: Path, timeout: float = 60.0) -> None:
        """``ctr -n k8s.io images import`` an image archive (the CRI plugin's namespace); return once the CRI has it.

        ``ctr`` returns when containerd has stored the images, but the CRI plugin learns of them later, from
        containerd's event stream: a task started at once could find its image missing (and try to pull it).
        """
        ctr = _require("ctr")
        result = subprocess.run(
            [ctr, "--address", str(self.socket), "-n", "k8s.io", "images", "import", "--no-unpack", str(archive)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise EngineUnavailable(f"ctr images import failed: {result.stderr.strip()}")
        import grpc

        from worker_agent.runtimes.cri_client import CriClient

        missing = _archive_tags(archive)
        deadline = time.monotonic() + timeout
        with CriClient(str(self.socket), timeout=10) as cri:
            while True:
                with contextlib.suppress(grpc.RpcError):  # the CRI plugin may still be starting
                    missing = [tag for tag in missing if not cri.has_image(tag)]
                if not missing:
                    return
                if time.monotonic() > deadline:
                    raise EngineUnavailable(
                        f"the CRI does not list {missing} {timeout:.0f}s after the import; see {self.log}"
                    )
                time.sleep(0.05)

    def stop(self) -> None:
        """Remove every pod, stop containerd, kill its shims, unmount and delete what it left."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(Exception):
                from worker_agent.runtimes.cri_client import CriClient

                with CriClient(str(self.socket)) as cri:
                    cri.remove_all_pods()
            _stop_process(self._process)
        _kill_processes_mentioning(str(self.socket))
        _unmount_under(self.base)
        _remove_empty_cgroups(["k8s.io"])
        # containerd keeps shim sockets and runc state under /run/containerd whatever `state` says;
        # drop the directories it left empty unless a system containerd lives there.
        run_dir = Path("/run/containerd")
        if run_dir.is_dir() and not (run_dir / "containerd.sock").exists():
            for directory in sorted((p for p in run_dir.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        shutil.rmtree(self.base, ignore_errors=True)


# ---------------------------------------------------------------------------------- images


def _needed_libraries(binaries: Iterable[Path]) -> set[Path]:
    """Shared libraries (and the loader) the binaries need, per ``ldd``."""
    found: set[Path] = set()
    for binary in binaries:
        result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
        for line in result.stdout.splitlines():
            parts = line.split()
            for part in parts:
                if part.startswith("/") and Path(part).exists():
                    found.add(Path(part))
    return found


class _Layer:
    """A root filesystem tar being built from host paths, parents (and symlinks on the way) first."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.added: set[str] = set()

    def add_dir(self, name: str, mode: int = 0o755) -> None:
        if name in self.added:
            return
        info = tarfile.TarInfo(name.lstrip("/"))
        info.type, info.mode = tarfile.DIRTYPE, mode
        self.tar.addfile(info)
        self.added.add(name)

    def add_symlink(self, name: str, target: str) -> None:
        if name in self.added:
            return
        info = tarfile.TarInfo(name.lstrip("/"))
        info.type, info.linkname = tarfile.SYMTYPE, target
        self.tar.addfile(info)
        self.added.add(name)

    def add_path(self, path: Path) -> None:
        """Add ``path`` as the host has it: each parent symlink as a symlink, then the target."""
        current = Path("/")
        for part in path.parts[1:]:
            current = current / part
            if str(current) in self.added:
                if current.is_symlink():
                    current = current.resolve()
                continue
            if current.is_symlink():
                target = str(current.readlink())
                self.add_symlink(str(current), target)
                resolved = current.resolve()
                self.add_path(resolved)
                current = resolved
            elif current.is_dir():
                self.add_dir(str(current), current.stat().st_mode & 0o7777)
            else:
                self.tar.add(str(current), arcname=str(current).lstrip("/"), recursive=False)
                self.added.add(str(current))

    def add_tree(self, root: Path, skip: frozenset[str]) -> None:
        self.add_path(root)
        for directory, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in skip]
            for name in [*dirs, *files]:
                self.add_path(Path(directory) / name)


def write_python_image(target: Path) -> Path:
    """Write a docker-archive with ``PYTHON_IMAGE`` and ``PAUSE_IMAGE`` (one shared layer) to ``target``.

    The layer holds this interpreter at its real path (``/usr/local/bin/python3`` links to it),
    its standard library without tests and GUI modules, the shared libraries these need, and
    ``sleep`` and ``/bin/sh``; enough to run Iris's task runner (whose code the runtime mounts) and plain commands.
    """
    python = Path(sys.executable).resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    sleep = Path(shutil.which("sleep") or "/usr/bin/sleep").resolve()
    shell = Path("/bin/sh").resolve()  # a job's setup commands run under /bin/sh
    dynload = [p for p in (stdlib / "lib-dynload").glob("*.so")]
    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w", format=tarfile.GNU_FORMAT) as tar:
        layer = _Layer(tar)
        for name, mode in (("/tmp", 0o1777), ("/proc", 0o555), ("/sys", 0o555), ("/dev", 0o755), ("/etc", 0o755)):
            layer.add_dir(name, mode)
        for name, text in (
            ("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
            ("/etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for path in [python, sleep, shell, *sorted(_needed_libraries([python, sleep, shell, *dynload]))]:
            layer.add_path(path)
        layer.add_symlink("/bin/sh", str(shell))
        layer.add_tree(stdlib, _STDLIB_SKIP)
        layer.add_path(Path("/usr/local/bin"))
        if _IMAGE_PYTHON not in layer.added:
            layer.add_symlink(_IMAGE_PYTHON, str(python))
    layer_data = layer_bytes.getvalue()
    diff_id = hashlib.sha256(layer_data).hexdigest()
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    images = {
        PYTHON_IMAGE: {"Env": env, "Cmd": [_IMAGE_PYTHON]},
        PAUSE_IMAGE: {"Env": env, "Entrypoint": [str(sleep), "infinity"]},
    }
    manifest = []
    with tarfile.open(target, "w") as archive:
        _add_bytes(archive, f"{diff_id}/layer.tar", layer_data)
        for tag, config in images.items():
            body = json.dumps({
                "architecture": _ARCH, "os": "linux", "config": config,
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
                "history": [{"created_by": "iris write_python_image"}],
            }).encode()  # fmt: skip
            config_name = f"{hashlib.sha256(body).hexdigest()}.json"
            _add_bytes(archive, config_name, body)
            manifest.append({"Config": config_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]})
        _add_bytes(archive, "manifest.json", json.dumps(manifest).encode())
    return target


def _archive_tags(archive: Path) -> list[str]:
    """The tags a docker-archive's ``manifest.json`` names."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        if member is None:
            raise EngineUnavailable(f"{archive} has no manifest.json")
        return [tag for image in json.load(member) for tag in image.get("RepoTags") or []]


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))
