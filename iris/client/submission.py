"""Turn a user's submission into a validated JobRequest, or a ValueError naming the field.

Everything is checked before anything is started or uploaded, so a rejected
request leaves no trace.
"""

from __future__ import annotations

import difflib
import getpass
import inspect
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import scheduler
from activities.contracts import INLINE_LAUNCH_BYTES
from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_constraint
from iris.client.bundle import setup_commands, zip_bundle
from iris.client.child_jobs import check_namespace
from iris.client.code_shipping import pickle_callable
from iris.client.job_control import IfExists, add_job_control, parse_if_exists
from iris.client.reservation_requests import add_reservation
from iris.types import Constraint, CoschedulingConfig, ResourceSpec
from scheduler.network import check_port_names
from scheduler.types import TAINT_PREFIX, Op
from worker_agent.checkpoints import CHECKPOINT_DIR_ENV, checkpoint_root
from workflows.jobs.job_limits import MAX_GANG_REPLICAS, MAX_REPLICAS

RESERVED_ENV_PREFIX = "IRIS_"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME_LENGTH = 200


def make_job_id(name: str) -> str:
    """A unique, path- and shell-safe id derived from the display name."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "job"
    return f"{slug}-{uuid.uuid4().hex[:8]}"


def _check_int(value: Any, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}, got {value!r}")
    return value


def _timeout_seconds(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise ValueError(f"scheduling_timeout must be a positive number of seconds or a timedelta, got {value!r}")
    return float(value)


def _constraints(constraints: Any) -> list[Constraint]:
    if constraints is None:
        return []
    if isinstance(constraints, (str, bytes, Constraint)) or not isinstance(constraints, Sequence):
        raise ValueError("constraints must be a list of Constraint")
    out = []
    for i, c in enumerate(constraints):
        if not isinstance(c, Constraint):
            raise ValueError(f"constraints[{i}] must be a Constraint, got {type(c).__name__}")
        if isinstance(c.value, str) and "\0" in c.value:
            raise ValueError(f"constraints[{i}].value must not contain NUL, got {c.value!r}")
        if isinstance(c.value, tuple) and any(isinstance(v, str) and "\0" in v for v in c.value):
            raise ValueError(f"constraints[{i}].value must not contain NUL, got {c.value!r}")
        out.append(c)
    try:
        scheduler.validate_constraints(out)
    except ValueError as err:
        raise ValueError(f"constraints: {err}") from None
    return out


def _env(env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise ValueError(f"env must be a mapping of names to strings, got {type(env).__name__}")
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(f"env: {key!r} is not a valid variable name")
        if key.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(f"env: {key!r} is reserved: Iris sets IRIS_* variables itself")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"env[{key!r}] must be a string without NUL, got {value!r}")
        out[key] = value
    return out


def check_option_names(options: Mapping[str, Any], caller: str, extra: Sequence[str] = ()) -> None:
    """An unknown keyword is the caller's TypeError, named as Python names it (with the likely option meant),
    not one of `build_request`, which the user never called."""
    known = [*inspect.signature(build_request).parameters, *extra]
    for key in options:
        if key not in known:
            hint = [k for k in known if k.startswith(key)] or difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            also = f" (did you mean {' or '.join(map(repr, hint))}?)" if hint else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{also}")


def build_request(
    *,
    name: str | None = None,
    resources: ResourceSpec | None = None,
    constraints: Any = None,
    coscheduling: CoschedulingConfig | None = None,
    env: Any = None,
    image: str | None = None,
    max_task_failures: int = 0,
    max_retries_failure: int = 0,
    max_retries_preemption: int = 100,
    scheduling_timeout: float | timedelta | None = None,
    priority: str = "interactive",
    tolerations: Sequence[str] = (),
    setup: str | Sequence[str] | None = None,
    ports: Sequence[str] = (),
    namespace: str | None = None,
    reservation: Any = None,
    reservation_constraints: Any = None,
    checkpoint_dir: Any = None,
    after: Any = None,
    after_rule: Any = "succeeded",
    max_concurrent: Any = None,
) -> pb.JobRequest:
    """Validate every option and build the request (without its entrypoint).

    `priority` is a band: "production", "interactive" (the default) or "batch",
    carried by name in the request's `band`. `reservation` (a list of ResourceSpec) and
    `reservation_constraints` are checked in iris.client.reservation_requests. The user is IRIS_USER, else the
    login name (`resolve_user`; the client overrides it with the connection's
    identity or `connect(user=...)` once it knows one). `namespace` defaults to the
    user (the client sets it once the user is known); a child job inherits its parent's.
    `checkpoint_dir` (a path or URL) gives every attempt of task i `IRIS_CHECKPOINT_DIR` =
    `checkpoint_dir/<i>`.
    """
    band = scheduler.parse_band(priority, "priority")
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH):
        shown = f"{len(name)} characters" if isinstance(name, str) and len(name) > MAX_NAME_LENGTH else repr(name)
        raise ValueError(f"name must be a non-empty string of at most {MAX_NAME_LENGTH} characters, got {shown}")
    if name is not None and any(ch in name for ch in "\0\n\r"):
        raise ValueError("name must not contain NUL or newlines")
    resources = ResourceSpec() if resources is None else resources
    if not isinstance(resources, ResourceSpec):
        raise ValueError(f"resources must be a ResourceSpec, got {type(resources).__name__}")
    if resources.replicas > MAX_REPLICAS:
        raise ValueError(f"resources.replicas must be at most {MAX_REPLICAS:,} (a job's table must stay within "
                         f"Temporal's payload limit; split the work into several jobs), got {resources.replicas}")
    cons = _constraints(constraints)
    if coscheduling is not None and not isinstance(coscheduling, CoschedulingConfig):
        raise ValueError(f"coscheduling must be a CoschedulingConfig, got {type(coscheduling).__name__}")
    if coscheduling is not None and resources.replicas > MAX_GANG_REPLICAS:
        raise ValueError(
            f"resources.replicas of a coscheduled job must be at most {MAX_GANG_REPLICAS} (a gang's tasks are "
            f"all pending at once), got {resources.replicas}"
        )
    topology = resources.tpu or next(
        (c.value for c in cons if c.key == "tpu-topology" and c.op == Op.EQ and isinstance(c.value, str)
         and not c.soft), None,
    )
    if resources.tpu:
        try:
            scheduler.tpu_vm_count(resources.tpu)
        except ValueError as err:
            raise ValueError(f"resources.tpu: {err}") from None
    if resources.tpu and not any(c.key == "tpu-topology" and not c.soft for c in cons):
        cons.append(Constraint("tpu-topology", Op.EQ, resources.tpu))
    if coscheduling is not None and topology is not None:
        try:
            scheduler.validate_coscheduled_tpu(topology, resources.replicas, coscheduling.num_groups)
        except ValueError as err:
            raise ValueError(f"resources.replicas: {err}") from None
    elif coscheduling is not None and resources.replicas % coscheduling.num_groups:
        raise ValueError(
            f"resources.replicas must be a multiple of coscheduling.num_groups ({coscheduling.num_groups}: "
            f"hosts per slice x slices), got {resources.replicas}"
        )
    if image is not None and (not isinstance(image, str) or not image):
        raise ValueError(f"image must be a non-empty string, got {image!r}")
    port_names = [ports] if isinstance(ports, str) else list(ports or ())
    problem = check_port_names(port_names)
    if problem:
        raise ValueError(problem)
    tols = []
    for i, t in enumerate(tolerations):
        if not isinstance(t, str) or not t:
            raise ValueError(f"tolerations[{i}] must be a taint name, got {t!r}")
        tols.append(t.removeprefix(TAINT_PREFIX))
    req = pb.JobRequest(
        name=name or "job",
        user=resolve_user(),
        replicas=resources.replicas,
        coschedule_group_by=coscheduling.group_by if coscheduling else "",
        coschedule_num_groups=coscheduling.num_groups if coscheduling and coscheduling.num_groups > 1 else 0,
        max_task_failures=_check_int(max_task_failures, "max_task_failures"),
        max_retries_failure=_check_int(max_retries_failure, "max_retries_failure"),
        max_retries_preemption=_check_int(max_retries_preemption, "max_retries_preemption"),
        scheduling_timeout_seconds=_timeout_seconds(scheduling_timeout),
        env=_env(env),
        image=image or "",
        tolerations=tols,
        band=band.value,
        submitted_at=time.time(),
        tpu_variant=resources.tpu or "",
        setup=setup_commands(setup),
        ports=port_names,
        namespace=check_namespace(namespace) if namespace is not None else "",
    )
    req.resources.cpu_millis = resources.cpu_millis
    req.resources.memory_bytes = resources.memory_bytes
    req.resources.gpus = resources.gpus
    for c in cons:
        set_constraint(req.constraints.add(), c.key, c.op, c.value, c.soft)
    add_reservation(req, reservation, reservation_constraints, _constraints)
    if checkpoint_dir is not None:  # each task's own directory under it: worker_agent.checkpoints
        req.env[CHECKPOINT_DIR_ENV] = checkpoint_root(checkpoint_dir)
    add_job_control(req, after, after_rule, max_concurrent)  # iris/client/job_control.py
    return req


def command_argv(command: Any) -> list[str]:
    if isinstance(command, str) or not isinstance(command, Sequence) or not command:
        raise ValueError("command must be a non-empty list of strings, e.g. ['python', '-c', 'print(1)']")
    for i, arg in enumerate(command):
        if not isinstance(arg, str) or "\0" in arg:
            raise ValueError(f"command[{i}] must be a string without NUL, got {arg!r}")
    return list(command)


USER_ENV = "IRIS_USER"
MAX_USER_LENGTH = 100


def resolve_user(user: str | None = None) -> str:
    """The job's user: the given one (the connection's identity or `connect(user=...)`), else IRIS_USER, else login.

    A user name must be non-empty, at most 100 characters, without whitespace,
    '/' or control characters (it names accounts and prefixes ids); a bad one is
    a ValueError naming `user`.
    """
    if user is None:
        user = os.environ.get(USER_ENV) or None
    if user is None:
        try:
            return getpass.getuser()
        except (KeyError, OSError):
            return "unknown"
    if not isinstance(user, str) or not user or len(user) > MAX_USER_LENGTH or any(
        ch.isspace() or ch == "/" or not ch.isprintable() for ch in user
    ):
        raise ValueError(
            f"user must be a name of 1-{MAX_USER_LENGTH} characters without spaces, '/' or control characters, "
            f"got {user!r}"
        )
    return user


def split_launch(req: pb.JobRequest) -> bytes | None:
    """Move a big command, env and setup out of `req`: the serialized pb.Launch to store, or None.

    Inline they are copied into every task's workflow input and every attempt's
    activity input; past INLINE_LAUNCH_BYTES they are stored once and each task
    carries the key (the caller stores the blob and sets `req.launch_blob`).
    """
    argv = list(req.entrypoint.command.argv)
    size = sum(len(a) + 1 for a in argv) + sum(len(k) + len(v) + 2 for k, v in req.env.items())
    size += sum(len(s) + 1 for s in req.setup)
    if size <= INLINE_LAUNCH_BYTES:
        return None
    launch = pb.Launch(argv=argv, env=dict(req.env), setup=list(req.setup))
    if req.entrypoint.HasField("command"):
        del req.entrypoint.command.argv[:]
        req.entrypoint.command.SetInParent()  # still a command job, its argv now in the blob
    req.env.clear()
    del req.setup[:]
    return launch.SerializeToString()


@dataclass(frozen=True)
class Submission:
    """A submission checked and built, before anything is sent (what a client sends to start a job)."""

    request: pb.JobRequest
    payload: bytes | None  # the pickled call (`submit`); None for a command
    bundle: tuple[str, bytes] | None
    given: frozenset[str]  # the options the caller set (a child's own values win over its parent's)
    if_exists: IfExists


def prepare_submission(
    options: dict[str, Any], *, fn: Callable[..., Any] | None = None, args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None, command: Sequence[str] | None = None,
) -> Submission:  # fmt: skip
    """Every check of `submit(fn, ...)` or `submit_command(command, ...)` (a direct client's and the Iris API
    client's alike): a bad option is a ValueError naming it, an unknown one the caller's TypeError."""
    check_option_names(options, "submit" if command is None else "submit_command", ("if_exists", "bundle"))
    argv = command_argv(command) if command is not None else None
    # Before a callable's name stands in for a missing one: reuse needs a name the caller chose (the function's
    # would hand back another call of it, with other arguments).
    if_exists = parse_if_exists(options.pop("if_exists", "new"), options.get("name"))  # iris/client/idempotent.py
    if argv is None:
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {type(fn).__name__}")
        options.setdefault("name", getattr(fn, "__name__", None) or "job")
    bundle = _bundle(options.pop("bundle", None), options.get("setup"))
    given = _given(options)
    req = build_request(**options)
    if argv is not None:
        req.entrypoint.command.argv.extend(argv)
        return Submission(req, None, bundle, given, if_exists)
    assert fn is not None  # callable, checked above
    return Submission(req, pickle_callable(fn, args, kwargs or {}), bundle, given, if_exists)


def _given(options: Mapping[str, Any]) -> frozenset[str]:
    """The options a submit set itself (a child's own values win over its parent's); an empty list is none."""
    return frozenset(k for k, v in options.items() if v is not None and not (isinstance(v, (list, tuple)) and not v))


def _bundle(directory: Any, setup: Any) -> tuple[str, bytes] | None:
    """The zipped bundle of `directory` (validated before anything is uploaded or started)."""
    if directory is None:
        if setup:
            raise ValueError("setup: needs a bundle (the directory it runs in)")
        return None
    if not isinstance(directory, (str, os.PathLike)):
        raise ValueError(f"bundle must be a directory path, got {type(directory).__name__}")
    return zip_bundle(directory)
