"""Server-side SVG charts of evaluation runs (no JavaScript, no CDN): a bar per run for one
metric, and latency against quality as a scatter. Every label is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

PALETTE = ("#1d4ed8", "#0e7490", "#b45309", "#7c3aed", "#be123c", "#15803d", "#4b5563", "#c2410c")


@dataclass(frozen=True)
class Point:
    label: str
    value: float
    x: float = 0.0  # the scatter's horizontal value (latency)


def bar_chart(title: str, points: Sequence[Point], *, maximum: float = 1.0, width: int = 560) -> SafeString:
    """Horizontal bars, one per run, scaled to `maximum` (metrics are in [0, 1])."""
    row, left, right = 26, 220, 60
    height = 34 + row * len(points)
    span = width - left - right
    bars = []
    for index, point in enumerate(points):
        y = 28 + index * row
        length = max(0.0, min(point.value / maximum, 1.0)) * span if maximum else 0.0
        bars.append(
            f'<text x="{left - 8}" y="{y + 14}" text-anchor="end">{escape(point.label)}</text>'
            f'<rect x="{left}" y="{y}" width="{length:.1f}" height="18" fill="{PALETTE[index % len(PALETTE)]}"/>'
            f'<text x="{left + length + 6:.1f}" y="{y + 14}">{point.value:.4f}</text>'
        )
    return mark_safe(
        f'<svg class="rag-chart" role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-size="12" font-family="sans-serif">'
        f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>{"".join(bars)}</svg>'
    )


def scatter_chart(title: str, points: Sequence[Point], *, x_label: str, y_label: str,
                  width: int = 560, height: int = 320) -> SafeString:
    """Latency (x) against quality (y): the runs up and to the left earn their cost."""
    left, bottom, top, right = 60, 40, 30, 160
    if not points:
        return mark_safe("")
    x_max = max(p.x for p in points) * 1.1 or 1.0
    y_values = [p.value for p in points]
    y_min, y_max = min(y_values), max(y_values)
    pad = (y_max - y_min) * 0.15 or 0.05
    y_min, y_max = max(0.0, y_min - pad), min(1.0, y_max + pad) if y_max <= 1.0 else y_max + pad

    def sx(x: float) -> float:
        return left + x / x_max * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y_min) / ((y_max - y_min) or 1.0) * (height - top - bottom)

    marks = []
    for index, point in enumerate(points):
        colour = PALETTE[index % len(PALETTE)]
        marks.append(
            f'<circle cx="{sx(point.x):.1f}" cy="{sy(point.value):.1f}" r="5" fill="{colour}"/>'
            f'<text x="{width - right + 12}" y="{top + 16 * index + 4}" fill="{colour}">'
            f'● {escape(point.label)} ({point.x:.0f} ms, {point.value:.4f})</text>'
        )
    axes = (
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#6b7280"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#6b7280"/>'
        f'<text x="{(left + width - right) / 2}" y="{height - 8}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="14" y="{(top + height - bottom) / 2}" transform="rotate(-90 14 {(top + height - bottom) / 2})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
        f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end">{y_min:.3f}</text>'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{y_max:.3f}</text>'
        f'<text x="{width - right}" y="{height - bottom + 14}" text-anchor="end">{x_max:.0f}</text>'
    )
    return mark_safe(
        f'<svg class="rag-chart" role="img" aria-label="{escape(title)}" width="{width + 220}" height="{height}" '
        f'viewBox="0 0 {width + 220} {height}" font-size="12" font-family="sans-serif">'
        f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>{axes}{"".join(marks)}</svg>'
    )
