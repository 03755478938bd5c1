"""Optional dependencies: which `iris[...]` extra brings which platform, runtime or store.

Why: cloud SDKs and engine clients are extras, so a base install stays small. Using one without
its extra must be a one-line error that says what to install, not an ImportError traceback.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PLATFORM_EXTRAS", "RUNTIME_EXTRAS", "missing_extra"]

PLATFORM_EXTRAS: Final = {"gcp": "gcp", "coreweave": "coreweave", "manual": "ssh"}
RUNTIME_EXTRAS: Final = {"docker": "docker", "containerd": "containerd"}


def missing_extra(subject: str, extra: str, error: ImportError) -> str:
    """The one line telling the user which extra `subject` needs (`error` names the missing module)."""
    module = f" (no module {error.name!r})" if error.name else ""
    return f"{subject} needs the {extra!r} extra: pip install 'iris[{extra}]'{module}"
