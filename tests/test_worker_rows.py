"""An agent checks its hosts and sends them as the rows the scheduler keeps (activities/contracts/worker_rows.py)."""

from __future__ import annotations

from activities.contracts import DEFAULT_PORT_RANGE
from activities.contracts.worker_rows import batch_of_rows
from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr, set_attr


def _host(worker_id: str, cpu_millis: int = 1000, **fields: object) -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(worker_id=worker_id, agent_session="s1", **fields)  # type: ignore[arg-type]
    meta.capacity.cpu_millis = cpu_millis
    meta.capacity.memory_bytes = 2**30
    return meta


def test_a_refused_host_is_named_with_its_reason_and_not_sent() -> None:
    batch, refused = batch_of_rows([_host("ok"), _host("neg", cpu_millis=-5), _host("a/b")], "reply-here")
    assert ["ok"] == [row.worker_id for row in batch.rows]
    assert "reply-here" == batch.reply_to
    assert {"neg", "a/b"} == set(refused)
    assert refused["neg"] == "registration refused: capacity.cpu_millis is negative (-5)"
    assert "without '/'" in refused["a/b"]


def test_a_row_has_what_the_host_declared_and_the_defaults_and_no_lifecycle() -> None:
    meta = _host("w1", host="node-1", heartbeat_timeout_seconds=6)
    set_attr(meta.attributes["zone"], "z1")
    set_attr(meta.attributes["chips"], 4)
    (row,) = batch_of_rows([meta], "r")[0].rows
    assert ("w1", "s1", 1000, 2**30) == (row.worker_id, row.session, row.cpu_millis, row.memory_bytes)
    assert {"zone": "z1", "chips": 4} == {k: get_attr(v) for k, v in row.attributes.items()}
    assert ("process", "node-1", 6.0) == (row.runtime, row.address, row.heartbeat_timeout_seconds)
    assert DEFAULT_PORT_RANGE == (row.port_range_start, row.port_range_end)
    assert ("", False, 0.0, 0) == (row.state, row.cordoned, row.suspect_until, row.dispatch_failures)  # the scheduler's
    (named,) = batch_of_rows([_host("w2", address="10.0.0.2", runtime="docker", port_range_start=100,
                                    port_range_end=200)], "r")[0].rows  # fmt: skip
    assert ("docker", "10.0.0.2", 100, 200) == (named.runtime, named.address, named.port_range_start,
                                                named.port_range_end)  # fmt: skip
