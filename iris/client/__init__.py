"""The client side of Iris: `IrisClient`/`AsyncIrisClient`, submission, and the reads of what Temporal holds.

`iris.client.IrisClient` and the others are imported when first asked for (PEP 562): a module of this package
that needs no client (the CLI's option parsing) does not load the client and the Temporal SDK with it.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iris.client.async_client import AsyncIrisClient  # what `iris.client` gave before the split
    from iris.client.iris_client import IrisClient, Job

__all__ = ["AsyncIrisClient", "IrisClient", "Job"]
_EXPORTS = {"AsyncIrisClient": "iris.client.async_client", "IrisClient": "iris.client.iris_client",
            "Job": "iris.client.iris_client"}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'iris.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
