"""A schedule's calls: through the Temporal SDK (iris/client/schedules.py, imported only to call it), or in team
mode through the Iris API (iris/auth/remote.py), so a team-mode `iris schedule` command loads no SDK."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from iris.client.code_shipping import pickle_callable
from iris.client.schedule_spec import ScheduleCalls, ScheduleStatus, check_schedule
from iris.client.submission import build_request, check_option_names, command_argv

if TYPE_CHECKING:
    from iris.client.async_client import AsyncIrisClient


async def create(
    client: AsyncIrisClient, name: str, fn: Callable[..., Any] | None, args: Sequence[Any], *,
    command: Sequence[str] | None = None, cron: str, timezone: str = "UTC", overlap: str = "skip",
    kwargs: dict[str, Any] | None = None, **options: Any,
) -> None:  # fmt: skip
    """Create the schedule `name`: each firing submits `fn(*args)` (or `command`) with the job `options`.

    Checked and built here, by the caller; started by `start` (in team mode by the Iris API, as the caller)."""
    check_option_names(options, "create_schedule" if command is None else "create_command_schedule",
                       ("if_exists", "bundle"))
    check_schedule(name, cron, timezone, overlap)
    for refused in ("if_exists", "bundle"):
        if options.get(refused) not in (None, "new"):
            raise ValueError(f"{refused}: not an option of a schedule's jobs")
        options.pop(refused, None)
    if fn is not None and not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    options.setdefault("name", name)
    req = build_request(**options)
    if command is not None:
        req.entrypoint.command.argv.extend(command_argv(command))
    if client.user:
        req.user = client.user
    req.name, req.schedule = name, name
    payload = pickle_callable(fn, tuple(args), kwargs or {}) if fn is not None else None
    if getattr(client, "remote", False):  # team mode: the API starts it, as the verified caller
        await client.create_schedule(req, payload, cron=cron, timezone=timezone, overlap=overlap)  # type: ignore[attr-defined]
        return
    from iris.client.schedules import start

    await start(client, req, payload, cron=cron, timezone=timezone, overlap=overlap)


async def list_all(client: AsyncIrisClient) -> list[ScheduleStatus]:
    """Every Iris schedule, by name: Temporal's listing, or in team mode the Iris API's."""
    if getattr(client, "remote", False):
        return await client.list_schedules()  # type: ignore[attr-defined,no-any-return]
    from iris.client.schedules import list_temporal

    return await list_temporal(client)


def handle(client: AsyncIrisClient, name: str) -> ScheduleCalls:
    """The schedule `name`: Temporal's, or in team mode the Iris API's (iris/auth/remote.py), alike."""
    if getattr(client, "remote", False):
        return client.schedule(name)  # type: ignore[attr-defined,no-any-return]
    from iris.client.schedules import AsyncSchedule

    return AsyncSchedule(client, name)
