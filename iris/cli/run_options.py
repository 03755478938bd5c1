"""The job options `iris run` and `iris schedule create` share: their flags, and the job they describe.

One declaration per flag (the `...Opt` types), one parameter list of them (`_job_flags`) that both commands
take through `takes_job_flags`, one place that turns the flags into the client's submit options with every
check (`job_options`), and one translation of a field's error into its flag (`as_flags`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from iris.cli.parsing import parse_constraint, parse_pair
from iris.cli.reservation_commands import parse_reserve
from iris.types import CoschedulingConfig, ResourceSpec

CommandArg = Annotated[list[str], typer.Argument(help="the command and its arguments, after --")]
ReplicasOpt = Annotated[int, typer.Option("--replicas", help="number of tasks")]
CpuOpt = Annotated[str, typer.Option("--cpu", help="cores per task (0.5 = half)")]
MemoryOpt = Annotated[str, typer.Option("--memory", help="memory per task, e.g. 2g")]
TpuOpt = Annotated[str | None, typer.Option("--tpu", help="TPU variant, e.g. v5e-16")]
GpuOpt = Annotated[int, typer.Option("--gpu", help="GPUs per task")]
ConstraintOpt = Annotated[
    list[str] | None,
    typer.Option("-c", "--constraint", help="k=v k!=v k>v k>=v k<v k<=v k !k, 'k in a,b', 'k notin a,b'"),
]
PreferOpt = Annotated[
    list[str] | None,
    typer.Option("--prefer", help="a soft constraint (same syntax as -c): matching workers first, else any"),
]
CoscheduleOpt = Annotated[
    str | None, typer.Option("--coschedule", help="place all tasks on workers sharing this attribute")
]
SlicesOpt = Annotated[
    int, typer.Option("--slices", help="with --coschedule: split the tasks evenly over this many groups (multi-slice)")
]
MaxTaskFailuresOpt = Annotated[
    int, typer.Option("--max-task-failures", help="tasks allowed to fail before the job fails")
]
MaxRetriesOpt = Annotated[int, typer.Option("--max-retries", help="retries of a task after its own failure")]
MaxPreemptionsOpt = Annotated[int, typer.Option("--max-preemptions", help="retries of a task after its worker died")]
SchedulingTimeoutOpt = Annotated[float | None, typer.Option("--scheduling-timeout", help="seconds to wait for a place")]
PriorityOpt = Annotated[
    str | None,
    typer.Option("--priority", help="band: production, interactive (default; a child job: its parent's) or batch "
                                    "(a user without credits runs as batch)"),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option("--namespace", help="the job's namespace (default: your user; a child job: its parent's)"),
]
EnvOpt = Annotated[list[str] | None, typer.Option("-e", "--env", help="K=V for the tasks")]
ImageOpt = Annotated[str | None, typer.Option("--image", help="container image (docker/containerd workers)")]
BundleOpt = Annotated[
    str | None, typer.Option("--bundle", help="ship this directory: the tasks' working directory, importable")
]
SetupOpt = Annotated[
    list[str] | None, typer.Option("--setup", help="shell command run once per job and host in the bundle first")
]
PortOpt = Annotated[
    list[str] | None, typer.Option("--port", help="a named port for each task (IRIS_PORT_<NAME>); repeatable")
]
ReserveOpt = Annotated[
    list[str] | None,
    typer.Option("--reserve", help="one worker's worth held for child jobs: cpu=4,memory=16g, xN to repeat "
                                   "(repeatable)"),
]
ReserveConstraintOpt = Annotated[
    list[str] | None, typer.Option("--reserve-constraint", help="where the reservation may be held, as --constraint")
]
CheckpointDirOpt = Annotated[
    str | None,
    typer.Option("--checkpoint-dir", help="path or URL: every attempt of task i gets IRIS_CHECKPOINT_DIR=<it>/<i>"),
]
AfterOpt = Annotated[
    list[str] | None, typer.Option("--after", help="run after this job has ended (see --after-rule); repeatable")
]
AfterRuleOpt = Annotated[
    str, typer.Option("--after-rule", help="succeeded: every --after job must succeed; ended: any end")
]
MaxConcurrentOpt = Annotated[
    int | None, typer.Option("--max-concurrent", help="at most N tasks of a job placed at once")
]

JobFlags = dict[str, Any]  # the job flags' values by parameter name: what `job_options(command, **flags)` takes


def _job_flags(
    replicas: ReplicasOpt = 1,
    cpu: CpuOpt = "1",
    memory: MemoryOpt = "1g",
    tpu: TpuOpt = None,
    gpu: GpuOpt = 0,
    constraint: ConstraintOpt = None,
    prefer: PreferOpt = None,
    coschedule: CoscheduleOpt = None,
    slices: SlicesOpt = 1,
    max_task_failures: MaxTaskFailuresOpt = 0,
    max_retries: MaxRetriesOpt = 0,
    max_preemptions: MaxPreemptionsOpt = 100,
    scheduling_timeout: SchedulingTimeoutOpt = None,
    priority: PriorityOpt = None,
    namespace: NamespaceOpt = None,
    env: EnvOpt = None,
    image: ImageOpt = None,
    bundle: BundleOpt = None,
    setup: SetupOpt = None,
    port: PortOpt = None,
    reserve: ReserveOpt = None,
    reserve_constraint: ReserveConstraintOpt = None,
    checkpoint_dir: CheckpointDirOpt = None,
    after: AfterOpt = None,
    after_rule: AfterRuleOpt = "succeeded",
    max_concurrent: MaxConcurrentOpt = None,
) -> None:
    """The job flags with their defaults, written once: `takes_job_flags` reads this signature."""


def takes_job_flags(command: Callable[..., None]) -> Callable[..., None]:
    """A command that takes every job flag: its keyword-only parameter `flags: JobFlags` stands for them.

    Typer builds a command's options from its signature, so the one the command shows is its own with
    `flags` replaced, in place, by `_job_flags`'s parameters; a call gathers their values back into `flags`.
    """
    shared = inspect.signature(_job_flags, eval_str=True).parameters
    own = inspect.signature(command, eval_str=True)
    if "flags" not in own.parameters:
        raise TypeError(f"{command.__name__} takes no `flags` parameter to stand for the job flags")
    params = [q.replace(kind=p.kind) if p.name == "flags" else p
              for p in own.parameters.values() for q in (shared.values() if p.name == "flags" else [p])]

    @functools.wraps(command)
    def with_flags(**kwargs: Any) -> None:
        flags = {name: kwargs.pop(name) for name in shared}
        command(flags=flags, **kwargs)

    del with_flags.__wrapped__  # Typer reads the signature below, not the command's own
    with_flags.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return with_flags


_FLAG_OF_FIELD = {
    "resources.replicas": "--replicas", "resources.cpu": "--cpu", "resources.memory": "--memory",
    "resources.tpu": "--tpu", "resources.gpus": "--gpu", "coscheduling.group_by": "--coschedule",
    "coscheduling.num_groups": "--slices",
    "max_task_failures": "--max-task-failures", "max_retries_failure": "--max-retries",
    "max_retries_preemption": "--max-preemptions", "scheduling_timeout": "--scheduling-timeout",
    "constraints": "--constraint", "env": "--env", "image": "--image", "name": "--name", "command": "CMD",
    "bundle": "--bundle", "setup": "--setup", "priority": "--priority", "ports": "--port",
    "reservation_constraints": "--reserve-constraint", "reservation": "--reserve",
    "checkpoint_dir": "--checkpoint-dir", "namespace": "--namespace",
    "after_rule": "--after-rule", "after": "--after", "max_concurrent": "--max-concurrent", "if_exists": "--if-exists",
}  # fmt: skip


def as_flags(message: str) -> str:
    """A submission error names the API field (`max_retries_failure`); on the command line, name the flag."""
    for field_name, flag in _FLAG_OF_FIELD.items():
        if message.startswith(field_name) and message[len(field_name):len(field_name) + 1] in (" ", ":", "[", "."):
            return flag + message[len(field_name):]
        quoted = f"{field_name}="  # "if_exists='reuse' needs a name": the flag and its value
        if message.startswith(quoted):
            return f"{flag} {message[len(quoted):]}"
    return message


def job_options(
    command: list[str], *, name: str | None, replicas: int, cpu: str, memory: str, tpu: str | None, gpu: int,
    constraint: list[str] | None, prefer: list[str] | None, coschedule: str | None, slices: int,
    max_task_failures: int, max_retries: int, max_preemptions: int, scheduling_timeout: float | None,
    priority: str | None, namespace: str | None, env: list[str] | None, image: str | None, bundle: str | None,
    setup: list[str] | None, port: list[str] | None, reserve: list[str] | None,
    reserve_constraint: list[str] | None, checkpoint_dir: str | None, after: list[str] | None, after_rule: str,
    max_concurrent: int | None,
) -> dict[str, Any]:
    """The submit options the flags describe, every check done before anything connects (ValueError naming
    the API field: `as_flags` names the flag)."""
    from iris.client.bundle import zip_bundle
    from iris.client.submission import build_request, command_argv
    if slices != 1 and coschedule is None:
        raise ValueError("--slices: needs --coschedule (the attribute that tells the slices apart)")
    options: dict[str, Any] = dict(
        name=name if name is not None else Path(command[0]).name if command else None,
        resources=ResourceSpec(cpu=cpu, memory=memory, gpus=gpu, tpu=tpu, replicas=replicas),
        constraints=[parse_constraint(c) for c in constraint or []]
        + [parse_constraint(p, "--prefer", soft=True) for p in prefer or []],
        coscheduling=CoschedulingConfig(coschedule, slices) if coschedule is not None else None,
        env=dict(parse_pair(e, "--env") for e in env or []),
        image=image,
        max_task_failures=max_task_failures,
        max_retries_failure=max_retries,
        max_retries_preemption=max_preemptions,
        scheduling_timeout=scheduling_timeout,
        setup=setup or None,
        ports=port or [],
        reservation=[parse_reserve(r) for r in reserve] if reserve else None,
        reservation_constraints=[parse_constraint(c, "--reserve-constraint") for c in reserve_constraint or []] or None,
    )
    options.update({k: v for k, v in (("priority", priority), ("namespace", namespace)) if v is not None})
    if checkpoint_dir is not None:
        options["checkpoint_dir"] = checkpoint_dir
    options.update(after=after or None, after_rule=after_rule, max_concurrent=max_concurrent)
    if setup and bundle is None:
        raise ValueError("setup: needs --bundle (the directory it runs in)")
    build_request(**options)  # every check, before anything connects or starts
    if bundle is not None:
        zip_bundle(bundle)  # a missing or oversized directory is an error before anything starts
        options["bundle"] = bundle
    command_argv(command)
    return options
