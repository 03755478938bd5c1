"""Job trees without a cluster: child ids, what a child inherits, the task's connection environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.contracts import parent_job_of, task_workflow_id
from activities.job_tree import descendants_query, kill_reason
from activities.proto import cluster_pb2 as pb
from iris.cli.tree_commands import tree_label, tree_order
from iris.client.child_jobs import MAX_JOB_ID_LENGTH, ancestors, check_namespace, child_job_id, inherit
from iris.client.submission import build_request, make_job_id
from iris.client.task_connection import referenced_files, require_cluster_address, task_cluster_env, task_parent
from iris.connection import TemporalSettings
from iris.types import Constraint, JobState, JobStatus, ResourceSpec


def test_a_childs_id_is_its_parents_id_and_a_name_of_its_own() -> None:
    """A child's id reads as a path below its parent's; a root job's parent is ""."""
    root = make_job_id("Train Model")
    child = child_job_id(root, make_job_id("eval"))
    grandchild = child_job_id(child, make_job_id("shard"))
    assert child.startswith(root + "/eval-") and grandchild.startswith(child + "/shard-")
    assert "" == parent_job_of(root)
    assert root == parent_job_of(child)
    assert child == parent_job_of(grandchild)
    assert [child, root] == ancestors(grandchild)
    assert f"{child}/task-3" == task_workflow_id(child, 3)


def test_a_tree_too_deep_for_temporal_is_refused_naming_the_field() -> None:
    """An id that would pass Temporal's workflow id limit is a ValueError naming `name`, not a failed start."""
    deep = "r" + "/abcdefgh-12345678" * ((MAX_JOB_ID_LENGTH // 18) - 1)
    with pytest.raises(ValueError, match=r"^name: .*too deep"):
        child_job_id(deep, "x" * 40)


def test_a_child_inherits_user_namespace_band_env_and_constraints() -> None:
    """Without options of its own, a child takes its parent's user, namespace, band, env and constraints."""
    parent = build_request(name="p", priority="production", namespace="team", env={"A": "1", "B": "2"},
                           constraints=[Constraint("pool", "EQ", "cpu")], tolerations=["spot"])
    parent.job_id, parent.user = "p-1", "alice"
    child = build_request(name="c", env={"B": "3"})
    child.user = "worker-identity"
    inherit(child, parent, dict(parent.env), given={"name", "env"})
    assert ("p-1", "alice", "team") == (child.parent_job_id, child.user, child.namespace)
    assert (parent.priority, "production") == (child.priority, child.band)
    assert {"A": "1", "B": "3"} == dict(child.env)  # its own values win
    assert [("pool", "EQ")] == [(c.key, c.op) for c in child.constraints]
    assert ["spot"] == list(child.tolerations)


def test_a_childs_own_options_win_over_its_parents() -> None:
    """A child that sets namespace, priority or constraints keeps its own; its tpu's topology stays its own."""
    parent = build_request(name="p", priority="production", namespace="team",
                           constraints=[Constraint("pool", "EQ", "cpu"), Constraint("tpu-topology", "EQ", "v5e-16")])
    parent.job_id, parent.user = "p-1", "alice"
    own = build_request(name="c", priority="batch", namespace="mine", constraints=[Constraint("zone", "EQ", "b")])
    inherit(own, parent, {}, given={"priority", "namespace", "constraints"})
    assert ("mine", build_request(priority="batch").priority) == (own.namespace, own.priority)
    assert "batch" == own.band
    assert ["zone"] == [c.key for c in own.constraints]
    tpu = build_request(name="c", resources=ResourceSpec(tpu="v5e-8", replicas=2))
    inherit(tpu, parent, {}, given={"resources"})
    topology = [c.value.string_value for c in tpu.constraints if c.key == "tpu-topology"]
    assert ["v5e-8"] == topology and "pool" in {c.key for c in tpu.constraints}


def test_a_parent_without_a_namespace_gives_its_user() -> None:
    """A parent submitted before namespaces existed hands its user down as the namespace."""
    parent = pb.JobRequest(job_id="old-1", user="bob")
    child = build_request(name="c")
    inherit(child, parent, {}, given=set())
    assert "bob" == child.namespace


@pytest.mark.parametrize("bad", ["", "two words", "x" * 101, "tab\there", 3])
def test_a_bad_namespace_is_refused_naming_the_field(bad: object) -> None:
    """A namespace must be a short name without spaces or control characters."""
    with pytest.raises(ValueError, match=r"^namespace must be"):
        check_namespace(bad)
    with pytest.raises(ValueError, match=r"^namespace must be"):
        build_request(name="j", namespace=bad)  # type: ignore[arg-type]


def test_descendants_are_found_by_id_prefix_and_told_who_ended() -> None:
    """The sweep lists running jobs below the ended one (not its tasks) and names it in each error."""
    query = descendants_query("a-1")
    assert "WorkflowId STARTS_WITH 'a-1/'" in query and "WorkflowType = 'JobWorkflow'" in query
    assert "killed: its parent job a-1 ended (SUCCEEDED)" == kill_reason("a-1", "ended (SUCCEEDED)", "a-1/b-2")
    assert "killed: its ancestor job a-1 was killed" == kill_reason("a-1", "was killed", "a-1/b-2/c-3")


def test_a_task_gets_its_clusters_address_and_secrets_only_by_reference(tmp_path: Path) -> None:
    """The agent gives tasks the address, namespace, store and file paths; an inline secret becomes a private file."""
    ca = tmp_path / "ca.pem"
    ca.write_text("ca")
    settings = TemporalSettings(address="127.0.0.1:7233", namespace="ns", tls_ca=ca, api_key="sekrit")
    env = task_cluster_env(settings, "file:///store", tmp_path / "secrets", environ={"IRIS_CODEC_KEY": "a2V5\n"})
    assert "127.0.0.1:7233" == env["IRIS_TEMPORAL_ADDRESS"] and "ns" == env["IRIS_TEMPORAL_NAMESPACE"]
    assert "file:///store" == env["IRIS_STORE"] and str(ca.resolve()) == env["IRIS_TEMPORAL_TLS_CA"]
    assert "sekrit" not in "".join(env.values()) and "a2V5" not in "".join(env.values())
    key_file = Path(env["IRIS_TEMPORAL_API_KEY_FILE"])
    assert "sekrit" == key_file.read_text() and 0o600 == key_file.stat().st_mode & 0o777
    assert "a2V5" == Path(env["IRIS_CODEC_KEY_FILE"]).read_text()
    assert sorted([str(ca.resolve()), str(key_file), env["IRIS_CODEC_KEY_FILE"]]) == sorted(referenced_files(env))
    loaded = TemporalSettings.load(**{k.removeprefix("IRIS_TEMPORAL_").lower(): v for k, v in env.items()
                                      if k.startswith("IRIS_TEMPORAL_")})
    assert "sekrit" == loaded.api_key_value()


def test_inside_a_task_no_embedded_cluster_is_started() -> None:
    """A task without its cluster's address gets one line, never a second embedded cluster; children follow the task."""
    with pytest.raises(ConnectionError, match="inside task of job j-1 no cluster address"):
        require_cluster_address({"IRIS_JOB_ID": "j-1"})
    require_cluster_address({})  # outside a task the embedded cluster is fine
    task = {"IRIS_JOB_ID": "j-1", "IRIS_TEMPORAL_ADDRESS": "127.0.0.1:7233"}
    assert "j-1" == task_parent("127.0.0.1:7233", task)
    assert "" == task_parent("10.0.0.1:7233", task)  # another cluster: a root job there
    assert "" == task_parent("127.0.0.1:7233", {})


def _listed(job_id: str, parent: str = "") -> JobStatus:
    return JobStatus(job_id, "n", JobState.RUNNING, 1, {}, "", "", 0.0, None, parent_job_id=parent)


def test_the_tree_listing_puts_each_child_below_its_parent() -> None:
    """`iris job list --tree`: children follow their parent, indented; a child whose parent is not listed is a root."""
    jobs = [_listed("a/b/c", "a/b"), _listed("z"), _listed("a/b", "a"), _listed("a"), _listed("gone/x", "gone")]
    rows = [(depth, tree_label(depth, job)) for depth, job in tree_order(jobs)]
    assert [(0, "z"), (0, "a"), (1, "└ b"), (2, "  └ c"), (0, "gone/x")] == rows
