"""The field types of the cluster config, declared once, and pydantic errors as one line naming the YAML path.

Each type is an `Annotated` type whose validator checks *and* normalizes (memory strings
to bytes, cores to millicores, "5m" to seconds), with the message a user reads ("must be
an integer >= 1, got 2.5"). The config models (iris.config.cluster_file) are made of these types, so a
field's rule lives in one place whether the value comes from a YAML file or from Python.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from activities.contracts import RuntimeName
from iris.units import kind, parse_cpu, parse_duration, parse_memory
from iris.units import short as _short
from scheduler.types import ATTRIBUTE_KEY_RULE, INT32_MAX, int64_refusal, is_attribute_key

NAME_MAX_LENGTH = 63
"""Group names prefix worker ids, process and log file names, and cloud resource names (63, as DNS labels)."""
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


class FieldError(ValueError):
    """A validator's error about a part of its value (`attributes` key `x`), so the path can name it."""

    def __init__(self, subpath: str, message: str) -> None:
        super().__init__(f"{subpath}: {message}")
        self.subpath = subpath
        self.message = message


def _name(value: object) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value) or len(value) > NAME_MAX_LENGTH:
        raise ValueError(
            f"a name must be 1-{NAME_MAX_LENGTH} letters, digits, '-', '_' or '.', "
            f"starting and ending with a letter or digit; got {_short(value)}"
        )
    return value


def _int_at_least(minimum: int, maximum: int | None = None) -> Any:
    def check(value: object) -> int:
        """Counts are real integers (not bools, not 2.0, not "2") so a typo cannot round silently."""
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, got {_short(value)}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be at most {maximum}, got {value}")
        return value

    return BeforeValidator(check)


def attribute_key(value: object) -> str:
    """An attribute key is what constraints and `--attribute K=V` name, so it must be plain text."""
    if not isinstance(value, str) or not is_attribute_key(value):
        raise ValueError(f"attribute key must be {ATTRIBUTE_KEY_RULE}, got {_short(value)}")
    return value


def _attributes(value: object) -> dict[str, str | int | float | bool]:
    """Scalars only (a list, mapping or missing value cannot be matched by a constraint); None = none."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of key: value, got {kind(value)}")
    for key, item in value.items():
        try:
            attribute_key(key)
        except ValueError as e:
            raise FieldError(str(key), str(e)) from None
        if not isinstance(item, (str, int, float, bool)):
            raise FieldError(str(key), f"attribute value must be a string, number or bool, got {kind(item)}")
        if isinstance(item, float) and not math.isfinite(item):
            raise FieldError(str(key), f"attribute value must be finite, got {item!r}")
        if too_big := int64_refusal(item):  # the wire's int64: a worker with it would stop at start
            raise FieldError(str(key), f"attribute value: {too_big}")
    return dict(value)


def _runtime(value: object) -> RuntimeName:
    try:
        return RuntimeName(value)  # type: ignore[arg-type]  # any value: a wrong one is the user's error
    except ValueError:
        raise ValueError(
            f"must be one of {', '.join(r.value for r in RuntimeName)}, got {_short(value)}"
        ) from None


def _image(value: object) -> str:
    """An image reference is one token: it becomes a command-line value and an engine argument."""
    if value is None:
        return ""
    if not isinstance(value, str) or any(c.isspace() or c == "\0" for c in value):
        raise ValueError(f"must be an image reference like 'python:3.11', got {_short(value)}")
    return value


def _unprefixed(parse: Any) -> Any:
    """parse_cpu/parse_memory name their field themselves; here the path names it."""

    def check(value: object) -> int:
        try:
            result: int = parse(value, field="")
        except ValueError as e:
            raise ValueError(str(e).removeprefix(": ")) from None
        return result

    return BeforeValidator(check)


def _none_is_empty(value: object) -> object:
    """`worker_groups:` with nothing after it means no groups, as an absent key does."""
    return [] if value is None else value


GroupName = Annotated[str, BeforeValidator(_name)]
AttributeKey = Annotated[str, BeforeValidator(attribute_key)]
Attributes = Annotated[dict[str, Any], BeforeValidator(_attributes)]
Runtime = Annotated[RuntimeName, BeforeValidator(_runtime)]
Image = Annotated[str, BeforeValidator(_image)]
Millicores = Annotated[int, _unprefixed(parse_cpu)]
Bytes = Annotated[int, _unprefixed(parse_memory)]
Seconds = Annotated[float, BeforeValidator(lambda v: parse_duration(v, ""))]
Devices = Annotated[int, _int_at_least(0, INT32_MAX)]  # gpus / tpus are int32 on the wire
AtLeastOne = Annotated[int, _int_at_least(1, INT32_MAX)]  # hosts and slices: int32 on the wire
AtLeastZero = Annotated[int, _int_at_least(0)]
ListOrNone = BeforeValidator(_none_is_empty)


def int_at_least(minimum: int, maximum: int | None = None) -> Any:
    """The validator of an integer field with bounds, for fields whose bounds are their own."""
    return _int_at_least(minimum, maximum)


# ---------------------------------------------------------------------------- errors as one line


def yaml_path(loc: tuple[int | str, ...]) -> str:
    """`("local", "worker_groups", 1, "count")` -> `local.worker_groups[1].count`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _model_fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model at `loc` (inside `model`) declares, for "did you mean" suggestions."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return []
        current = _inner_model(fields[part].annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields is not None else []


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside `Model`, `Model | None`, `list[Model]`, `tuple[Model, ...]`, `Annotated[...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return None
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def unknown_key_message(key: str, known: list[str]) -> str:
    """`unknown key 'resourcez' — did you mean 'resources'? (known: ...)`."""
    hint = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    listed = f" (known: {', '.join(known)})" if known else ""
    return f"unknown key{suggestion}{listed}"


def describe_error(error: Any, model: type[BaseModel] | None) -> tuple[str, str]:
    """(YAML path, message) of one pydantic error, in the config's words."""
    loc = tuple(error["loc"])
    kind_ = error["type"]
    ctx = error.get("ctx") or {}
    original = ctx.get("error")
    if isinstance(original, FieldError):
        return yaml_path((*loc, original.subpath)), original.message
    if kind_ == "extra_forbidden":
        known = _model_fields_at(model, loc[:-1]) if model is not None else []
        return yaml_path(loc), unknown_key_message(str(loc[-1]), known)
    if kind_ == "missing":
        return yaml_path(loc), "is required"
    if kind_ in ("model_type", "model_attributes_type", "dict_type", "dataclass_type"):
        return yaml_path(loc), f"must be a mapping, got {kind(error.get('input'))}"
    if kind_ in ("list_type", "tuple_type"):
        return yaml_path(loc), f"must be a list, got {kind(error.get('input'))}"
    if kind_ in ("value_error", "assertion_error") and original is not None:
        return yaml_path(loc), str(original)
    return yaml_path(loc), f"{error['msg']}, got {_short(error.get('input'))}"


def one_line_error(err: ValidationError, source: str, model: type[BaseModel] | None) -> ValueError:
    """The first error of `err` as `source: path: message` (with how many more there are)."""
    errors = err.errors()
    # a typo shows up twice (the unknown key, and the key it meant as missing): name the typo
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path, message = describe_error(first, model)
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return ValueError(f"{source}: {path or '(top level)'}: {message}{more}")
