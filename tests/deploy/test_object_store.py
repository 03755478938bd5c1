"""The shared store on a real S3-compatible server: blobs, chunked logs read by cursor, and a job end to end."""

from __future__ import annotations

import pytest

from iris import IrisClient, ResourceSpec
from tests.deploy.conftest import S3, Deployment
from tests.support import wait_until
from worker_agent.object_store import ObjectBlobStore, ObjectLogStore, open_blob_store
from worker_agent.storage import BlobNotFoundError, BlobStore, LogCursor


def test_blobs_round_trip_and_a_missing_one_says_so(s3: S3) -> None:
    """put/get/exists/delete on s3://; keys with '/' and '..' stay one object each; missing = BlobNotFoundError."""
    store = open_blob_store(s3.url("blobs-test"))
    assert isinstance(store, ObjectBlobStore)
    store.put("jobs/a/../b/function", b"payload")
    assert b"payload" == store.get("jobs/a/../b/function")
    assert store.exists("jobs/a/../b/function") and not store.exists("jobs/b/function")
    with pytest.raises(BlobNotFoundError):
        store.get("jobs/none")
    store.delete("jobs/a/../b/function")
    assert not store.exists("jobs/a/../b/function")
    assert isinstance(open_blob_store("file:///tmp/x"), BlobStore)


def test_logs_are_appended_in_chunks_and_read_with_a_cursor(s3: S3) -> None:
    """A writer ships what is new as new chunk objects; a cursor returns each complete line once, in order."""
    logs = ObjectLogStore(s3.url("logs-test"))
    cursor: LogCursor | None = None
    with logs.open_writer("job/1", 0, 0) as writer:
        writer.write(b"first\n")
        got, cursor = wait_until(lambda: (r := logs.read_new("job/1", 0, cursor))[0] and r, timeout=30)
        assert ["first"] == got
        writer.write(b"sec")
        prefix = logs._attempt_prefix("job/1", 0, 0)
        shipped = len(b"first\nsec")
        wait_until(lambda: shipped == sum(size for _, size in logs._chunks(prefix)), timeout=30)  # "sec" is stored
        got, cursor = logs.read_new("job/1", 0, cursor)
        assert [] == got  # half a line is not returned while the attempt is being written
        writer.write(b"ond\nthird\n")
    got, cursor = logs.read_new("job/1", 0, cursor)
    assert ["second", "third"] == got
    chunks = logs._chunks(prefix)
    assert len(chunks) >= 3  # appended as chunks, never one object rewritten
    assert len(b"first\nsecond\nthird\n") == sum(size for _, size in chunks)
    with logs.open_writer("job/1", 0, 1) as retry:
        retry.write(b"retry\n")
    assert ["first", "second", "third", "retry"] == logs.read_lines("job/1", 0)
    assert (["retry"], ((0, 19), (1, 6))) == ((r := logs.read_new("job/1", 0, cursor))[0], r[1].offsets)


def slow_job(n: int) -> int:
    import time

    print("working on", n, flush=True)
    time.sleep(4)
    print("done", flush=True)
    return n * 7


@pytest.mark.e2e
def test_a_job_on_an_s3_store_streams_its_logs_and_returns_its_result(deployment: Deployment, s3: S3) -> None:
    """Controller and agent on --store s3://…: the callable ships through S3, its log streams, its result returns."""
    d = deployment.daemons
    d.store_url = s3.url("e2e")
    d.controller("controller")
    d.worker("w1")
    client = IrisClient.connect(deployment.info.address, store=d.store_url)
    job = client.submit(slow_job, 6, resources=ResourceSpec(cpu=0.5, memory="256m"))
    cursor = None
    seen: list[str] = []

    def first_line() -> bool:
        nonlocal cursor
        lines, cursor = client._async.read_new_logs(job.job_id, 0, cursor)
        seen.extend(lines)
        return bool(seen)

    wait_until(first_line, timeout=120, interval=0.3, what="the first log line through S3")
    assert ["working on 6"] == seen  # read while the task still sleeps: "done" is not written yet
    job.wait(timeout=120)
    assert [42] == job.results()
    assert ["working on 6", "done"] == job.logs(0)
    lines, _ = client._async.read_new_logs(job.job_id, 0, cursor)
    assert ["done"] == lines
