"""`iris cluster status` of a local cluster in team mode: the Iris API and what the caller's token may read.

It prints no Temporal address and no Temporal UI: users reach the cluster only through the API,
which checks every call (docs/operators.md, "Team mode").
"""

from __future__ import annotations

from iris.cli.common import out
from iris.local.record import ClusterInfo


def _plain(text: str) -> None:
    out.print(text, markup=False, highlight=False)


def print_team_status(info: ClusterInfo, down: list[str]) -> None:
    _plain(f"Auth: {info.auth} (team mode: every call needs a token; IRIS_TOKEN or IRIS_TOKEN_FILE)")
    _plain(f"Iris API: {info.dashboard_url}")
    _plain(f"Dashboard: {info.dashboard_url}")
    for name in down:
        _plain(f"down: {name} (pid {info.pids.get(name)} exited)")
    from iris.auth.remote import resolve_token
    from iris.client.iris_client import IrisClient

    token = resolve_token()
    if token is None:
        _plain("workers: unknown (no token: set IRIS_TOKEN or IRIS_TOKEN_FILE to read the cluster's state)")
        return
    client = IrisClient.connect(info.dashboard_url, token=token)
    try:
        summary = client._run(client._async.summary(1.5))
    except (PermissionError, ConnectionError, TimeoutError) as e:
        _plain(f"workers: unknown ({e})")
        return
    finally:
        client.close()
    _plain(f"workers: {summary.healthy_workers} healthy of {summary.total_workers}\n"
           f"queue: {summary.pending_tasks} pending tasks, {summary.running_tasks} placed")  # fmt: skip
