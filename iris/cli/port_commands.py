"""`iris job endpoints JOB`, and the parsing of `iris worker serve --port-range`."""

from __future__ import annotations

from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, iris_client, out


def job_endpoints(job_id: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """List the named ports of the job's running tasks (from the job's published state, no query)."""
    found = iris_client(temporal, store).endpoints(job_id)
    table = Table("NAME", "TASK", "ADDRESS")
    for name in sorted(found):
        for index, address in sorted(found[name].items()):
            table.add_row(name, str(index), address)
    out.print(table)


def parse_port_range(text: str, flag: str = "--port-range") -> tuple[int, int]:
    """'START-END' (inclusive) as two ports; ValueError naming `flag` when it is not one."""
    start, sep, end = text.partition("-")
    try:
        first, last = int(start), int(end)
    except ValueError:
        raise ValueError(f"{flag}: expected START-END, e.g. 20000-29999, got {text!r}") from None
    if not sep or not 1 <= first <= last <= 65_535:
        raise ValueError(f"{flag}: expected START-END within 1-65535 with START <= END, got {text!r}")
    return first, last

