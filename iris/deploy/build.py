"""`iris build` and `iris build push`: the controller, worker and task images, through the docker SDK.

The images are built from a source checkout (the build context is the repository root, where
`infra/*.Dockerfile` are); the engine is the one `DOCKER_HOST` names (or the local socket).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.extras import missing_extra

IMAGES: dict[str, str] = {
    "iris-controller": "infra/controller.Dockerfile",
    "iris-worker": "infra/worker.Dockerfile",
    "iris-task": "infra/task.Dockerfile",
}


class BuildError(Exception):
    """A build or push failed; the message is the engine's own last error line."""


@dataclass(frozen=True)
class BuiltImage:
    name: str
    tag: str
    image_id: str

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"


def _api(docker_host: str | None) -> Any:
    try:
        import docker
    except ModuleNotFoundError as err:
        raise BuildError(missing_extra("iris build", "docker", err)) from None

    try:
        if docker_host:
            return docker.APIClient(base_url=docker_host, timeout=600)
        return docker.from_env(timeout=600).api
    except docker.errors.DockerException as err:
        where = f" at {docker_host}" if docker_host else ""
        raise BuildError(f"cannot reach the docker engine{where}: {err}") from None


def _follow(stream: Iterable[dict[str, Any]], on_line: Callable[[str], None]) -> dict[str, Any]:
    """Pass the engine's progress on; raise BuildError on its error; the last message with an id."""
    last: dict[str, Any] = {}
    for chunk in stream:
        if "error" in chunk:
            raise BuildError(str(chunk["error"]).strip())
        text = chunk.get("stream") or chunk.get("status")
        if text and text.strip():
            on_line(text.rstrip())
        if "aux" in chunk:
            last = chunk["aux"]
    return last


def build_images(
    context: Path, *, tag: str = "latest", names: Iterable[str] = IMAGES, build_args: Mapping[str, str] | None = None,
    docker_host: str | None = None, on_line: Callable[[str], None] = lambda _: None,
) -> list[BuiltImage]:
    """Build each named image from `context` (a source checkout); ValueError if it is not one."""
    context = context.resolve()
    missing = [IMAGES[n] for n in names if not (context / IMAGES[n]).is_file()]
    if missing:
        raise ValueError(f"--context: {context} is not an Iris source checkout (no {', '.join(missing)})")
    api = _api(docker_host)
    built = []
    for name in names:
        stream = api.build(path=str(context), dockerfile=IMAGES[name], tag=f"{name}:{tag}", rm=True,
                           buildargs=dict(build_args or {}), decode=True)
        aux = _follow(stream, on_line)
        built.append(BuiltImage(name, tag, str(aux.get("ID", ""))))
    return built


def push_images(
    registry: str, *, tag: str = "latest", names: Iterable[str] = IMAGES, docker_host: str | None = None,
    on_line: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """Tag the built images as `<registry>/<name>:<tag>` and push them; the pushed references."""
    registry = registry.rstrip("/")
    if not registry or "://" in registry:
        raise ValueError(f"--registry: expected host[:port][/path], e.g. ghcr.io/acme, got {registry!r}")
    api = _api(docker_host)
    pushed = []
    for name in names:
        target = f"{registry}/{name}"
        try:
            api.tag(f"{name}:{tag}", target, tag)
        except Exception as err:
            raise BuildError(f"cannot tag {name}:{tag} (run `iris build` first): {err}") from None
        _follow(api.push(target, tag=tag, stream=True, decode=True), on_line)
        pushed.append(f"{target}:{tag}")
    return pushed
