"""IN, NOT_IN and soft constraints through the public client and the CLI, on the session cluster.

The session fleet: `cpu-0`, `cpu-1` (pool=cpu) and the four hosts of `slice-a` (tpu-worker-id 0..3).
A plain task without preferences goes to a CPU host first (slices are kept whole for gangs).
"""

from __future__ import annotations

from iris import Constraint, IrisClient, JobState, ResourceSpec
from tests.ops.cli import iris
from tests.support import Cluster

SMALL = ResourceSpec(cpu=0.25, memory="64m")


def test_in_places_tasks_only_on_the_listed_values(client: IrisClient) -> None:
    """`tpu-worker-id IN [1, 2]`: both tasks run on slice-a-1 / slice-a-2."""
    job = client.submit_command(
        ["true"],
        resources=ResourceSpec(cpu=0.25, memory="64m", replicas=2),
        constraints=[Constraint("tpu-worker-id", "IN", [1, 2])],
    )
    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert {t.worker_id for t in status.tasks} <= {"slice-a-1", "slice-a-2"}


def test_not_in_excludes_the_listed_values_and_workers_without_the_attribute(client: IrisClient) -> None:
    """`tpu-worker-id NOT_IN [0, 1, 2]`: only slice-a-3 qualifies (CPU hosts have no tpu-worker-id)."""
    job = client.submit_command(
        ["true"], resources=SMALL, constraints=[Constraint("tpu-worker-id", "NOT_IN", [0, 1, 2])]
    )
    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert ["slice-a-3"] == [t.worker_id for t in status.tasks]


def test_a_soft_constraint_steers_a_task_and_an_unmet_one_does_not_stop_it(client: IrisClient) -> None:
    """Preferring slice-a-3 lands there (not on a CPU host); preferring a zone nobody has still runs."""
    preferred = client.submit_command(
        ["true"], resources=SMALL, constraints=[Constraint("tpu-worker-id", "EQ", 3, soft=True)]
    )
    nowhere = client.submit_command(
        ["true"],
        resources=SMALL,
        constraints=[Constraint("pool", "EQ", "cpu"), Constraint("zone", "IN", ["mars-1"], soft=True)],
    )
    status = preferred.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert ["slice-a-3"] == [t.worker_id for t in status.tasks]
    other = nowhere.wait(timeout=120)
    assert JobState.SUCCEEDED == other.state
    assert other.tasks[0].worker_id.startswith("cpu-")


def test_cli_takes_in_notin_and_prefer(cluster: Cluster, client: IrisClient) -> None:
    """`iris run -c "k in a,b" --prefer EXPR` runs where asked; a bad list is one line on stderr, exit 2."""
    ran = iris(cluster, "run", "--cpu", "0.25", "--memory", "64m", "-c", "tpu-worker-id notin 0,1",
               "--prefer", "tpu-worker-id in 2", "--", "sh", "-c", 'echo "on $IRIS_WORKER_ID"')  # fmt: skip
    assert 0 == ran.returncode, ran.stderr
    assert "on slice-a-2" in ran.stdout
    bad = iris(cluster, "run", "-c", "zone in a,1", "--", "true")
    assert 2 == bad.returncode
    assert 1 == len(bad.stderr.strip().splitlines()), bad.stderr
    assert "--constraint 'zone in a,1'" in bad.stderr and "one type" in bad.stderr
    empty = iris(cluster, "run", "--prefer", "zone in a,,b", "--", "true")
    assert 2 == empty.returncode
    assert "--prefer 'zone in a,,b'" in empty.stderr


def test_a_string_attribute_that_reads_like_a_number_stays_a_string(cluster: Cluster, client: IrisClient) -> None:
    """The CPU hosts' `rev: "1.10"` (quoted in the config) is the string "1.10" on the worker (it became the
    float 1.1 on its way through `--attribute`): the string matches, the number does not, and the pending
    reason says which one it wanted; the CLI writes the string quoted."""
    workers = {w.worker_id: w for w in client.list_workers()}
    assert "1.10" == workers["cpu-0"].attributes["rev"]
    ran = client.submit_command(["true"], resources=SMALL, constraints=[Constraint("rev", "EQ", "1.10")])
    assert ran.wait(timeout=120).tasks[0].worker_id.startswith("cpu-")
    number = client.submit_command(["true"], resources=SMALL, constraints=[Constraint("rev", "EQ", 1.1)],
                                   scheduling_timeout=3)  # fmt: skip
    # the second waits out its timeout beside the first
    text = client.submit_command(["true"], resources=SMALL, constraints=[Constraint("rev", "EQ", "1.1")],
                                 scheduling_timeout=3)  # fmt: skip
    status = number.wait(timeout=60, raise_on_failure=False)
    assert JobState.UNSCHEDULABLE == status.state
    assert "lack rev=1.1" in status.error, status.error
    assert 'lack rev="1.1"' in text.wait(timeout=60, raise_on_failure=False).error
    cli = iris(cluster, "run", "--cpu", "0.25", "--memory", "64m", "-c", 'rev="1.10"', "--", "true")
    assert 0 == cli.returncode, cli.stderr
