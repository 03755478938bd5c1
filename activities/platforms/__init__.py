"""Platforms that create, bootstrap and delete slices; one module per platform (see base.py).

`platform_for(group)` picks the platform a scale group names. Modules are imported
only when a group uses them, so a cloud SDK is loaded only where that cloud is
configured. Each module exposes a class constructed from a `ScaleGroupSpec` and a
pydantic `Settings` model for the group's own config block.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from pydantic import ValidationError

from activities.contracts.fleet import ScaleGroupSpec
from activities.extras import PLATFORM_EXTRAS, missing_extra
from activities.platforms.base import Platform

# platform name -> "module:Class"; tests may register a platform of their own under a new name.
REGISTRY: dict[str, str] = {
    "local": "activities.platforms.local:LocalPlatform",
    "manual": "activities.platforms.manual:ManualPlatform",
    "gcp": "activities.platforms.gcp:GcpPlatform",
    "coreweave": "activities.platforms.coreweave:CoreweavePlatform",
}


def platform_class(name: str) -> type[Any]:
    """The class registered for platform `name`; ValueError naming the known ones otherwise."""
    target = REGISTRY.get(name)
    if target is None:
        raise ValueError(f"platform: unknown platform {name!r} (known: {', '.join(sorted(REGISTRY))})")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        extra = PLATFORM_EXTRAS.get(name)
        if extra is None:
            raise ValueError(f"platform: {name!r} is not available in this installation ({e})") from None
        raise ValueError(missing_extra(f"platform: {name!r}", extra, e)) from None
    return cast(type[Any], getattr(module, class_name))


def platform_for(group: ScaleGroupSpec) -> Platform:
    """The platform that makes `group`'s slices, its settings validated (ValueError naming the field)."""
    cls = platform_class(group.platform)
    try:
        return cast(Platform, cls(group))
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"scale group {group.name}: {group.platform}.{where}: {first['msg']}") from None
