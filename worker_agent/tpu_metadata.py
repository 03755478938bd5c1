"""On a Cloud TPU VM the agent learns its slice from the GCE metadata server.

The metadata host follows `$GCE_METADATA_HOST` as google-auth does (default
`metadata.google.internal`), and every request carries `Metadata-Flavor: Google`.
A TPU VM's instance attributes hold `accelerator-type`, `agent-worker-number`,
`worker-network-endpoints` (one comma-separated entry per VM of the slice) and
`tpu-env` (`KEY: 'value'` lines with NODE_ID, WORKER_ID, TOPOLOGY, ...).
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request

import structlog

AttributeValue = str | int | float | bool

METADATA_HOST_ENV = "GCE_METADATA_HOST"
DEFAULT_METADATA_HOST = "metadata.google.internal"
ATTRIBUTES_PATH = "/computeMetadata/v1/instance/attributes/"

# worker attribute names the agent fills (the scheduler's coscheduling keys plus descriptive ones)
TPU_NAME = "tpu-name"
TPU_WORKER_ID = "tpu-worker-id"
TPU_TOPOLOGY = "tpu-topology"  # Iris's variant name (v5e-16), which `iris run --tpu` constrains on
TPU_ACCELERATOR_TYPE = "tpu-accelerator-type"  # the API's own name (v5litepod-16)
TPU_CHIP_TOPOLOGY = "tpu-chip-topology"  # the physical chip grid (4x4)
TPU_VM_COUNT = "tpu-vm-count"

# the API's generation names -> Iris's (scheduler/tpu.py knows v5e/v6e)
_GENERATION_ALIASES = {"v5litepod": "v5e", "v6litepod": "v6e"}

log = structlog.get_logger("iris.tpu_metadata")


class MetadataUnavailable(Exception):  # noqa: N818 - a state, not a programming error
    """The metadata server did not answer, or this is not a TPU VM."""


def metadata_host() -> str:
    """host[:port] of the metadata server ($GCE_METADATA_HOST, as google-auth reads it)."""
    return os.environ.get(METADATA_HOST_ENV) or DEFAULT_METADATA_HOST


def metadata_server_configured() -> bool:
    """Whether to ask without being told to: only when $GCE_METADATA_HOST names a server.

    (No probe of metadata.google.internal: off GCP its DNS lookup can stall every agent start.)
    """
    return bool(os.environ.get(METADATA_HOST_ENV))


def _get(key: str, timeout: float) -> str | None:
    """One instance attribute's value; None when the VM has no such attribute."""
    request = urllib.request.Request(
        f"http://{metadata_host()}{ATTRIBUTES_PATH}{key}", headers={"Metadata-Flavor": "Google"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if response.headers.get("Metadata-Flavor") != "Google":
                raise MetadataUnavailable(f"{metadata_host()} is not a GCE metadata server")
            return str(response.read().decode())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise MetadataUnavailable(f"metadata {key}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise MetadataUnavailable(f"metadata server {metadata_host()}: {getattr(e, 'reason', e)}") from None


def parse_tpu_env(text: str) -> dict[str, str]:
    """`KEY: 'value'` lines of the tpu-env attribute -> {KEY: value}."""
    env = {}
    for line in text.splitlines():
        match = re.match(r"^\s*([A-Z0-9_]+)\s*:\s*'?(.*?)'?\s*$", line)
        if match:
            env[match[1]] = match[2]
    return env


def iris_variant(accelerator_type: str) -> str:
    """The API's accelerator type in Iris's variant names (v5litepod-16 -> v5e-16)."""
    generation, _, size = accelerator_type.partition("-")
    return f"{_GENERATION_ALIASES.get(generation, generation)}-{size}" if size else accelerator_type


def read_tpu_attributes(timeout: float = 2.0) -> dict[str, AttributeValue]:
    """This VM's TPU attributes from the metadata server; MetadataUnavailable when it is not a TPU VM."""
    accelerator = _get("accelerator-type", timeout)
    if accelerator is None:
        raise MetadataUnavailable("the metadata server knows no accelerator-type: not a TPU VM")
    env = parse_tpu_env(_get("tpu-env", timeout) or "")
    worker = _get("agent-worker-number", timeout) or env.get("WORKER_ID", "")
    endpoints = [e for e in (_get("worker-network-endpoints", timeout) or "").split(",") if e.strip()]
    attributes: dict[str, AttributeValue] = {
        TPU_ACCELERATOR_TYPE: accelerator.strip(),
        TPU_TOPOLOGY: iris_variant(accelerator.strip()),
    }
    if env.get("NODE_ID"):
        attributes[TPU_NAME] = env["NODE_ID"]
    if worker.strip().isdigit():
        attributes[TPU_WORKER_ID] = int(worker)
    if env.get("TOPOLOGY"):
        attributes[TPU_CHIP_TOPOLOGY] = env["TOPOLOGY"]
    if endpoints:
        attributes[TPU_VM_COUNT] = len(endpoints)
    return attributes


def tpu_attributes_if_available(required: bool | None, timeout: float = 2.0) -> dict[str, AttributeValue]:
    """The TPU attributes when `required` (a flag said this is a TPU VM), or when None and $GCE_METADATA_HOST is set.

    Raises MetadataUnavailable only when required; otherwise absence is an empty dict.
    """
    if required is False or (required is None and not metadata_server_configured()):
        return {}
    try:
        attributes = read_tpu_attributes(timeout)
    except MetadataUnavailable as e:
        if required:
            raise
        log.info("tpu_metadata_absent", reason=str(e))
        return {}
    log.info("tpu_metadata", **{k.replace("-", "_"): v for k, v in attributes.items()})
    return attributes
