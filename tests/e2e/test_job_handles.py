"""`client.job(job_id)`: the handle `submit` returns, for a job started by anyone, from any process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from iris import IrisClient, JobFailedError, JobState
from tests.support import Cluster

SUBMITTER = textwrap.dedent(
    """
    import sys
    from iris import IrisClient, ResourceSpec
    def square_of_index(offset):
        import os
        index = int(os.environ["IRIS_TASK_INDEX"])
        print("task", index)
        return (index + offset) ** 2

    client = IrisClient.connect(sys.argv[1], store=sys.argv[2])
    job = client.submit(square_of_index, 1, resources=ResourceSpec(cpu=0.5, memory="128m", replicas=3))
    print(job.job_id)
    client.close()
    """
)


def test_a_job_submitted_by_another_process_is_handled_through_client_job(cluster: Cluster, client: IrisClient) -> None:
    """A job another process submitted (a callable of that process's own script) is waited on, read and
    its results and logs fetched through `client.job(job_id)`, exactly as through the handle `submit` returned."""
    started = subprocess.run(
        [sys.executable, "-c", SUBMITTER, cluster.info.address, cluster.info.store_url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    job_id = started.stdout.strip().splitlines()[-1]
    job = client.job(job_id)
    assert job_id == job.job_id
    assert JobState.SUCCEEDED == job.wait(timeout=120).state
    assert [1, 4, 9] == job.results()
    assert ["task 2"] == job.logs(task_index=2)
    assert JobState.SUCCEEDED == job.status().state


def test_client_job_of_an_unknown_id_is_a_key_error(client: IrisClient) -> None:
    """An id that names no job (or names one of Iris's own workflows) fails at once, not at first use."""
    with pytest.raises(KeyError, match="no such job"):
        client.job("no-such-job-0000")
    with pytest.raises(KeyError, match="not a job"):
        client.job("iris-scheduler")


def test_client_job_of_a_failed_job_raises_like_the_submitted_handle(client: IrisClient) -> None:
    """`results()` on a handle from `client.job` of a failed job raises JobFailedError, as `submit`'s does."""
    submitted = client.submit_command(["sh", "-c", "exit 5"])
    again = client.job(submitted.job_id)
    assert JobState.FAILED == again.wait(timeout=120, raise_on_failure=False).state
    with pytest.raises(JobFailedError):
        again.results()
