"""Job trees: how a child job's id and request follow from its parent's (pure: no I/O, no Temporal).

A job submitted from inside a task is a child of the task's job. Its id is the parent's id, a `/`
and a unique name derived from its own (ids read as paths, so `WorkflowId STARTS_WITH 'PARENT/'`
finds a whole subtree), and its request inherits the parent's user, namespace, priority band and
env (its own env values win) and, unless it sets its own, the parent's constraints and tolerations.
When a job ends, its unfinished descendants are killed (activities/job_tree.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from activities.contracts import JOB_ID_SEPARATOR as SEPARATOR
from activities.contracts import parent_job_of
from activities.proto import cluster_pb2 as pb
from worker_agent.checkpoints import CHECKPOINT_DIR_ENV

MAX_JOB_ID_LENGTH = 900
"""Temporal refuses workflow ids past 1,000 characters; a job's task ids add `/task-N` to its id."""
MAX_NAMESPACE_LENGTH = 100

NAMESPACE_ENV = "IRIS_NAMESPACE"
PARENT_ENV = "IRIS_PARENT_JOB_ID"
JOB_ENV = "IRIS_JOB_ID"


def child_job_id(parent_id: str, own_id: str) -> str:
    """The id of a child of `parent_id` whose own (root-style) id would be `own_id`.

    ValueError when the tree is so deep that the id would pass Temporal's workflow id limit.
    """
    if not parent_id:
        return own_id
    job_id = f"{parent_id}{SEPARATOR}{own_id}"
    if len(job_id) > MAX_JOB_ID_LENGTH:
        raise ValueError(
            f"name: the child's id would be {len(job_id)} characters (at most {MAX_JOB_ID_LENGTH}): "
            f"the job tree under {parent_id.split(SEPARATOR, 1)[0]} is too deep"
        )
    return job_id


def ancestors(job_id: str) -> list[str]:
    """Every ancestor's id of a job id, nearest first."""
    out = []
    while job_id := parent_job_of(job_id):
        out.append(job_id)
    return out


def check_namespace(value: object) -> str:
    """A namespace: 1-100 printable characters without spaces; ValueError naming `namespace`."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAMESPACE_LENGTH or any(
        ch.isspace() or not ch.isprintable() for ch in value
    ):
        raise ValueError(
            f"namespace must be a name of 1-{MAX_NAMESPACE_LENGTH} characters without spaces or control "
            f"characters, got {value!r}"
        )
    return value


def inherit(
    child: pb.JobRequest, parent: pb.JobRequest, parent_env: Mapping[str, str], given: Collection[str]
) -> None:
    """Make `child` (validated, its id not set yet) a child of `parent`, in place.

    `parent_env` is the parent's env as its tasks got it (inline or from its launch blob);
    `given` names the options the child's submit set itself: `namespace`, `priority`,
    `constraints` and `tolerations` it set win over the parent's, and its env values win key by
    key. The user is always the parent's: a tree belongs to one user, whoever's worker runs it.
    Constraints the child did not set come from the parent, except those on a key the child's
    own resources imply (`tpu-topology` from `resources.tpu`), which stay the child's.
    """
    child.parent_job_id = parent.job_id
    child.user = parent.user
    if "namespace" not in given:
        child.namespace = parent.namespace or parent.user
    if "priority" not in given:  # the band (by name) and its rank, both: the scheduler reads the band
        child.priority, child.band = parent.priority, parent.band
    # A child's checkpoints are its own: it does not inherit the parent's checkpoint root.
    env = {**{k: v for k, v in parent_env.items() if k != CHECKPOINT_DIR_ENV}, **child.env}
    child.env.clear()
    child.env.update(env)
    if "constraints" not in given:
        implied = list(child.constraints)
        keys = {c.key for c in implied}
        del child.constraints[:]
        child.constraints.extend(c for c in parent.constraints if c.key not in keys)
        child.constraints.extend(implied)
    if "tolerations" not in given:
        own = list(child.tolerations)
        del child.tolerations[:]
        child.tolerations.extend(dict.fromkeys([*parent.tolerations, *own]))
