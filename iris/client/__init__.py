"""The client side of Iris: `IrisClient`/`AsyncIrisClient`, submission, and the reads of what Temporal holds.

`iris.client.IrisClient` and the others are imported when first asked for (PEP 562): a module of this package
that needs no client (the CLI's option parsing) does not load the client and the Temporal SDK with it.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iris.client.iris_client import AsyncIrisClient, IrisClient, Job  # what `iris.client` gave before the split

__all__ = ["AsyncIrisClient", "IrisClient", "Job"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'iris.client' has no attribute {name!r}")
    value = getattr(importlib.import_module("iris.client.iris_client"), name)
    globals()[name] = value
    return value
