"""The autoscaler's published status in words, for `iris autoscaler status` (and any other view of it).

Pure: it reads the `GroupStatus` the autoscaler workflow's `status` query returns and says what a
group does now and why ("at max_slices (2)", "backing off until 10:42:05 after QuotaExhausted: ...",
"waiting scale_up_delay", "idle slice ... kept as buffer"), so every view words it the same way.
"""

from __future__ import annotations

import time

from workflows.fleet.autoscaler_state import GroupStatus


def _age(since: float, now: float) -> str:
    seconds = max(0, int(now - since))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def explain_group(g: GroupStatus, unmet: dict[str, str], now: float) -> list[str]:
    """A group's state in words: its slices, the demand on it, what it does now and why, its last decision."""
    lines = []
    for state, ids in sorted(g.slices.items()):
        shown = []
        for slice_id in ids:
            since = g.idle_since.get(slice_id)
            notes = [n for n in (g.capacity.get(slice_id, "").replace("_", "-"),
                                 "" if since is None else f"idle {_age(since, now)}") if n]  # fmt: skip
            shown.append(f"{slice_id} ({', '.join(notes)})" if notes else slice_id)
        lines.append(f"{state.lower()}: {', '.join(shown)}")
    if g.capacity_policy:
        capacity = f"capacity: {g.capacity_policy}"
        if g.fallback_reason:
            capacity += f"; new slices on-demand until {_clock(g.fallback_until)} (spot fallback: {g.fallback_reason})"
        lines.append(capacity)
    waiting = [job for job, why in unmet.items() if g.reason and f"{g.name}: {g.reason}" in why]
    booting = sum(len(ids) for state, ids in g.slices.items() if state in ("CREATING", "BOOTSTRAPPING"))
    demand = f"{len(waiting)} jobs wait for this group" if waiting else "no job waits for this group"
    lines.append(f"demand: {demand}" + (f", {booting} slices coming up" if booting else ""))
    live = sum(len(ids) for state, ids in g.slices.items() if state != "DRAINING")
    if g.backoff_reason:
        until = _clock(now + g.backoff_seconds)
        after = g.last_error_type or "a failure"
        lines.append(f"now: backing off until {until} after {after}: {g.last_error or g.backoff_reason}")
    elif g.reason.startswith("scale_up_delay"):
        lines.append(f"now: waiting scale_up_delay ({g.reason})")
    elif g.reason:
        lines.append(f"now: not scaling up: {g.reason}")
    elif g.idle_since:
        slice_id, since = min(g.idle_since.items(), key=lambda item: item[1])
        if live <= g.min_slices:
            lines.append(f"now: idle slice {slice_id} kept as buffer (min_slices {g.min_slices})")
        elif len(g.idle_since) <= g.buffer_slices:
            lines.append(f"now: idle slice {slice_id} kept as buffer (buffer_slices {g.buffer_slices})")
        else:
            left = max(0, int(since + g.scale_down_delay - now))
            lines.append(f"now: idle slice {slice_id} kept as buffer for scale_down_delay "
                         f"{g.scale_down_delay:g}s ({left}s left)")  # fmt: skip
    elif booting:
        lines.append(f"now: waiting for {booting} slices to come up")
    else:
        lines.append("now: steady (nothing to scale)")
    if g.last_decision:
        lines.append(f"last decision at {_clock(g.last_decision_at)}: {g.last_decision}")
    if g.last_placement:
        lines.append(f"zones: {g.last_placement}")
    if g.last_error and not g.backoff_reason:
        lines.append(f"last error ({g.last_error_type or 'error'}): {g.last_error}")
    return lines
