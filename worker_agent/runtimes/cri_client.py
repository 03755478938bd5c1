"""Small helpers over the generated CRI v1 stubs: channels, log-line parsing, a blocking client.

The containerd runtime talks to the CRI with ``grpc.aio``; tests and the private-engine helper
use the blocking ``CriClient`` to ask the engine what is left and to clean up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import TracebackType
from typing import Final

import grpc

from worker_agent.runtimes.cri import cri_runtime_v1_pb2 as cri
from worker_agent.runtimes.cri import cri_runtime_v1_pb2_grpc as cri_grpc

__all__ = ["CriClient", "CriLogParser", "channel_target"]

_RPC_TIMEOUT_SECONDS: Final = 60.0


def channel_target(socket: str) -> str:
    """The gRPC target for a unix socket path (or a target already given as ``unix://...``)."""
    return socket if socket.startswith("unix:") else f"unix://{socket}"


class CriLogParser:
    """Turns the CRI log file format back into the task's bytes.

    Each line the runtime writes is ``<RFC3339 time> <stdout|stderr> <P|F> <content>``: ``F`` ends
    a line of the task's output, ``P`` is a piece of a longer line that continues in the next
    record. Feed raw bytes as they are read; get back the task's output.
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> bytes:
        """The task output carried by the complete records in ``data`` (and earlier leftovers)."""
        self._pending += data
        records = self._pending.split(b"\n")
        self._pending = records.pop()
        return b"".join(self._decode(record) for record in records)

    def finish(self) -> bytes:
        """Whatever a final record without a newline carried."""
        rest, self._pending = self._pending, b""
        return self._decode(rest) if rest else b""

    @staticmethod
    def _decode(record: bytes) -> bytes:
        parts = record.split(b" ", 3)
        if len(parts) < 3:
            return record + b"\n"  # not the CRI format: pass it through as a line
        tag = parts[2]
        content = parts[3] if len(parts) == 4 else b""
        return content if tag == b"P" else content + b"\n"


class CriClient:
    """A blocking CRI client for tests and cleanup: what pods and containers exist, and removing them."""

    def __init__(self, socket: str, timeout: float = _RPC_TIMEOUT_SECONDS) -> None:
        self._channel = grpc.insecure_channel(channel_target(socket))
        self._runtime = cri_grpc.RuntimeServiceStub(self._channel)
        self._images = cri_grpc.ImageServiceStub(self._channel)
        self._timeout = timeout

    def __enter__(self) -> CriClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._channel.close()

    def version(self) -> cri.VersionResponse:
        """The engine's name and CRI version (an answer means the CRI plugin is up)."""
        response: cri.VersionResponse = self._runtime.Version(cri.VersionRequest(), timeout=self._timeout)
        return response

    def has_image(self, image: str) -> bool:
        """Whether the CRI knows ``image`` (a tag or digest) locally, i.e. a task could start from it without a pull."""
        request = cri.ImageStatusRequest(image=cri.ImageSpec(image=image))
        return bool(self._images.ImageStatus(request, timeout=self._timeout).image.id)

    def list_containers(self, labels: Mapping[str, str] | None = None) -> list[cri.Container]:
        """Containers in any state whose labels include ``labels``."""
        request = cri.ListContainersRequest(filter=cri.ContainerFilter(label_selector=dict(labels or {})))
        return list(self._runtime.ListContainers(request, timeout=self._timeout).containers)

    def list_pods(self, labels: Mapping[str, str] | None = None) -> list[cri.PodSandbox]:
        """Pod sandboxes in any state whose labels include ``labels``."""
        request = cri.ListPodSandboxRequest(filter=cri.PodSandboxFilter(label_selector=dict(labels or {})))
        return list(self._runtime.ListPodSandbox(request, timeout=self._timeout).items)

    def remove_all_pods(self) -> None:
        """Stop and remove every pod sandbox (and with it its containers)."""
        for pod in self.list_pods():
            with contextlib.suppress(grpc.RpcError):
                self._runtime.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=pod.id), timeout=self._timeout)
            with contextlib.suppress(grpc.RpcError):
                self._runtime.RemovePodSandbox(
                    cri.RemovePodSandboxRequest(pod_sandbox_id=pod.id), timeout=self._timeout
                )
