"""Inline SVG pictures: capacity used per group, queue depth over time. Pure functions of numbers.

Inline SVG needs no script and no library, scales with the page and survives the closed network.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH = 640
BAR_HEIGHT = 18
BAR_GAP = 10
LABEL_WIDTH = 150


@dataclass(frozen=True)
class Usage:
    """One group's used and total capacity of one resource (e.g. cpu cores)."""

    group: str
    used: float
    total: float
    unit: str = "cpu"


def capacity_bars(rows: Sequence[Usage]) -> str:
    """A horizontal bar per group: the used part filled, the label saying used / total."""
    if not rows:
        return ""
    bar_width = WIDTH - LABEL_WIDTH - 130
    height = len(rows) * (BAR_HEIGHT + BAR_GAP) + BAR_GAP
    parts = [
        f'<svg class="chart" role="img" aria-label="capacity used per group" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, row in enumerate(rows):
        y = BAR_GAP + i * (BAR_HEIGHT + BAR_GAP)
        share = 0.0 if row.total <= 0 else min(1.0, row.used / row.total)
        used = share * bar_width
        level = "full" if share >= 0.9 else "busy" if share >= 0.6 else "ok"
        parts.append(
            f'<text x="0" y="{y + 13}" class="label">{escape(row.group[:22])}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{bar_width}" height="{BAR_HEIGHT}" class="bar-bg"/>'
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{used:.1f}" height="{BAR_HEIGHT}" class="bar-{level}"/>'
            f'<text x="{LABEL_WIDTH + bar_width + 8}" y="{y + 13}" class="value">'
            f"{row.used:g} / {row.total:g} {escape(row.unit)} ({share:.0%})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class DepthHistory:
    """Pending tasks sampled over time (bounded): what the queue-depth picture draws."""

    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=720))

    def add(self, depth: int, at: float | None = None) -> None:
        self.samples.append((time.time() if at is None else at, depth))


def depth_line(samples: Sequence[tuple[float, int]], height: int = 120) -> str:
    """Pending tasks over time as a filled line, with the peak and the time span labelled."""
    if len(samples) < 2:
        return ""
    t0, t1 = samples[0][0], samples[-1][0]
    span = max(t1 - t0, 1e-9)
    peak = max(d for _, d in samples) or 1
    left, top, plot_w, plot_h = 50, 10, WIDTH - 60, height - 30
    points = [
        (left + (t - t0) / span * plot_w, top + plot_h - d / peak * plot_h) for t, d in samples
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    area = f"{left},{top + plot_h} {line} {points[-1][0]:.1f},{top + plot_h}"
    minutes = span / 60
    return (
        f'<svg class="chart" role="img" aria-label="queue depth over time" data-since="{t0:.1f}" '
        f'viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="axis"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>'
        f'<polygon points="{area}" class="area"/><polyline points="{line}" class="line"/>'
        f'<text x="{left - 6}" y="{top + 10}" class="label" text-anchor="end">{peak}</text>'
        f'<text x="{left - 6}" y="{top + plot_h}" class="label" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 4}" class="label">{minutes:.1f} min ago</text>'
        f'<text x="{left + plot_w}" y="{height - 4}" class="label" text-anchor="end">now: {samples[-1][1]}</text>'
        "</svg>"
    )
