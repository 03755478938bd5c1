"""A registered host as the scheduler keeps it: its `pb.WorkerRow`, checked and filled from what the agent declares.

Checked and built where the host is declared (the agent, `register_hosts`), once per host and off the singleton
scheduler: a fleet's registrations come in bursts (10,000 hosts when a scheduler starts empty), and checking and
copying each host's metadata in the scheduler took ~11 us a host, a 30,000-host burst ~0.35 s of one workflow task.
A row is read by the scheduler as it is (~1 us a host); what only the scheduler can judge (another healthy agent
already holds the id) it still checks. The lifecycle fields (state, quarantine, cordon) are the scheduler's: a row
comes with them unset.
"""

from __future__ import annotations

from activities.contracts import DEFAULT_PORT_RANGE, MAX_HEARTBEAT_TIMEOUT_SECONDS, MIN_HEARTBEAT_TIMEOUT_SECONDS
from activities.proto import cluster_pb2 as pb

SUPPORTED_RUNTIMES = ("process", "docker", "containerd")


def validate_metadata(meta: pb.WorkerMetadata) -> str:
    """A reason to refuse this registration, or "" when it is acceptable."""
    if not meta.worker_id:
        return "worker_id is empty"
    if len(meta.worker_id) > 200 or any(c in meta.worker_id for c in "/\x00\n"):
        return f"worker_id {meta.worker_id!r} must be at most 200 characters without '/', NUL or newlines"
    cap = meta.capacity
    for name in ("cpu_millis", "memory_bytes", "gpus", "tpus"):
        if getattr(cap, name) < 0:
            return f"capacity.{name} is negative ({getattr(cap, name)})"
    if cap.cpu_millis == 0 and cap.memory_bytes == 0:
        return "capacity is empty: a worker needs some cpu or memory"
    for key, value in meta.attributes.items():
        if not key:
            return "attribute with an empty key"
        if value.WhichOneof("kind") is None:
            return f"attribute {key!r} has no value (supported: string, int, float, bool)"
    start, end = meta.port_range_start, meta.port_range_end
    if (start or end) and not 1 <= start <= end <= 65_535:
        return f"port range {start}-{end} is not within 1-65535 with start <= end"
    timeout = meta.heartbeat_timeout_seconds
    if timeout and not MIN_HEARTBEAT_TIMEOUT_SECONDS <= timeout <= MAX_HEARTBEAT_TIMEOUT_SECONDS:
        return (f"heartbeat_timeout_seconds {timeout:g} is not within {MIN_HEARTBEAT_TIMEOUT_SECONDS:g}-"
                f"{MAX_HEARTBEAT_TIMEOUT_SECONDS:g}")  # fmt: skip
    if meta.runtime and meta.runtime not in SUPPORTED_RUNTIMES:
        return f"runtime {meta.runtime!r} is not one of {', '.join(SUPPORTED_RUNTIMES)}"
    return ""


def row_from_metadata(meta: pb.WorkerMetadata) -> pb.WorkerRow:
    """The row of a host whose metadata `validate_metadata` accepted (attributes copied in C)."""
    cap = meta.capacity
    start, end = (meta.port_range_start, meta.port_range_end) if meta.port_range_start else DEFAULT_PORT_RANGE
    row = pb.WorkerRow(
        worker_id=meta.worker_id, session=meta.agent_session, cpu_millis=cap.cpu_millis,
        memory_bytes=cap.memory_bytes, gpus=cap.gpus, tpus=cap.tpus, runtime=meta.runtime or "process",
        host=meta.host, address=meta.address or meta.host or meta.worker_id,
        port_range_start=start, port_range_end=end, heartbeat_timeout_seconds=meta.heartbeat_timeout_seconds,
    )  # fmt: skip
    row.attributes.MergeFrom(meta.attributes)
    return row


def registration_refused(reason: str) -> str:
    """What an agent is told of a host the registration refused, whoever refused it (the agent's own check
    of its metadata, or the scheduler)."""
    return f"registration refused: {reason}"


def batch_of_rows(hosts: list[pb.WorkerMetadata], reply_to: str) -> tuple[pb.WorkerBatch, dict[str, str]]:
    """The batch an agent sends for `hosts` (the acceptable ones, as rows) and the refused ones, id -> reason."""
    batch = pb.WorkerBatch(reply_to=reply_to)
    refused: dict[str, str] = {}
    for meta in hosts:
        reason = validate_metadata(meta)
        if reason:
            refused[meta.worker_id] = registration_refused(reason)
        else:
            batch.rows.append(row_from_metadata(meta))
    return batch, refused
