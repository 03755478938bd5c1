"""Links from the dashboard into the Temporal UI: one workflow's page, or a list filtered by a query."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class TemporalUI:
    """Where the Temporal UI is and which namespace Iris lives in."""

    url: str
    namespace: str = "default"

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://", "/")):  # "/...": served by the dashboard (team mode)
            raise ValueError(f"temporal_ui_url must start with http:// or https://, got {self.url!r}")
        object.__setattr__(self, "url", self.url.rstrip("/"))

    def workflow(self, workflow_id: str) -> str:
        """`<UI URL>/namespaces/<namespace>/workflows/<workflow id>`: the UI opens the latest run."""
        return f"{self.url}/namespaces/{quote(self.namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"

    def search(self, query: str) -> str:
        """The UI's workflow list filtered by a visibility query (e.g. one worker's liveness sessions)."""
        return f"{self.url}/namespaces/{quote(self.namespace, safe='')}/workflows?query={quote(query, safe='')}"


def default_ui_url(temporal_address: str) -> str:
    """The dev server's UI address for a Temporal at HOST:PORT (`temporal server start-dev` uses PORT + 1000)."""
    host, _, port = temporal_address.rpartition(":")
    try:
        return f"http://{host or '127.0.0.1'}:{int(port) + 1000}"
    except ValueError:
        return f"http://{temporal_address}"
