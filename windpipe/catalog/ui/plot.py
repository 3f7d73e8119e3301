"""Server-drawn SVG of a segment's channels: the geometry the segment page's template
writes out (no chart library, no script in the browser).

One panel per channel, all on one x axis (the segment's time column when it is finite
and never decreasing, else the row number). A channel is a single ``<path>``: the
downsampled points (:mod:`windpipe.catalog.ui.downsample`) joined by lines, a new subpath after
each gap. A plan's windows over the segment are rectangles behind the line; past
:data:`MAX_RECTS` windows the rectangles are the windows' union (runs of rows some
window reads), so the page stays small whatever the plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from windpipe.catalog.ui.downsample import DEFAULT_MAX_POINTS, minmax_downsample

__all__ = ["HEIGHT", "MAX_RECTS", "WIDTH", "Panel", "SegmentPlot", "draw_segment",
           "window_runs"]

WIDTH = 960
HEIGHT = 140
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 10, 10, 20
MAX_RECTS = 500


@dataclass(frozen=True)
class Panel:
    """One channel's panel: the path (empty when the channel is missing or has no finite
    value), how many points it joins, and the labels of its y range."""

    name: str
    missing: bool
    path: str
    points: int
    y_low: str
    y_high: str


@dataclass(frozen=True)
class SegmentPlot:
    """Every panel of a segment, the x axis' labels and the windows drawn as
    ``(x, width)`` rectangles (the same on every panel)."""

    panels: tuple[Panel, ...]
    x_label: str
    x_low: str
    x_high: str
    rects: tuple[tuple[float, float], ...]
    windows: int
    merged: bool
    width: int = WIDTH
    height: int = HEIGHT
    left: int = _LEFT
    top: int = _TOP
    plot_width: int = WIDTH - _LEFT - _RIGHT
    plot_height: int = HEIGHT - _TOP - _BOTTOM


def _label(value: float) -> str:
    return f"{value:.4g}"


def _path(px: np.ndarray, py: np.ndarray, breaks: np.ndarray) -> str:
    """``M x y L x y ...``: a new ``M`` at every break (after a gap of nulls)."""
    if px.shape[0] == 0:
        return ""
    words = np.where(breaks, "M", "L")
    coords = [f"{w}{x:.1f} {y:.1f}" for w, x, y in
              zip(words.tolist(), px.tolist(), py.tolist(), strict=True)]
    return " ".join(coords)


def window_runs(windows: np.ndarray) -> np.ndarray:
    """The union of row ranges ``[a, b)`` (int64 ``[K, 2]``) as disjoint sorted runs."""
    if windows.shape[0] == 0:
        return windows.reshape(0, 2)
    order = np.argsort(windows[:, 0], kind="stable")
    starts, stops = windows[order, 0], windows[order, 1]
    reach = np.maximum.accumulate(stops)
    new = np.ones(starts.shape[0], dtype=np.bool_)
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, starts.shape[0] - 1)
    return np.stack([starts[first], reach[last]], axis=1)


def draw_segment(
    channels: Iterable[tuple[str, np.ndarray | None]], *, rows: int, time: np.ndarray | None,
    time_name: str, windows: np.ndarray, max_points: int = DEFAULT_MAX_POINTS,
) -> SegmentPlot:
    """The panels of ``channels`` (``(name, float64 values)`` pairs, None: the segment
    lacks it; taken one at a time, so a lazy iterable holds one full column at once)
    over ``rows`` rows, with ``windows`` (int64 ``[K, 2]`` row ranges ``[a, b)`` in the
    segment) behind them; ``time`` is the x axis when usable."""
    use_time = (time is not None and rows > 0 and bool(np.isfinite(time).all())
                and bool((np.diff(time) >= 0).all()) and float(time[-1]) > float(time[0]))
    if use_time:
        assert time is not None
        x_of_row = time.astype(np.float64)
        x_low, x_high = float(time[0]), float(time[-1])
    else:
        x_of_row = None
        x_low, x_high = 0.0, float(max(rows - 1, 1))
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM

    def px_of(r: np.ndarray) -> np.ndarray:
        x = r.astype(np.float64) if x_of_row is None else x_of_row[np.clip(r, 0, rows - 1)]
        return _LEFT + (x - x_low) / (x_high - x_low) * plot_w

    panels = []
    for name, values in channels:
        if values is None:
            panels.append(Panel(name=name, missing=True, path="", points=0, y_low="", y_high=""))
            continue
        kept = minmax_downsample(values, max_points=max_points)
        if len(kept) == 0:
            panels.append(Panel(name=name, missing=False, path="", points=0,
                                y_low="-", y_high="-"))
            continue
        lo, hi = float(kept.values.min()), float(kept.values.max())
        span = hi - lo if hi > lo else 1.0
        py = _TOP + plot_h - (kept.values - lo) / span * plot_h
        panels.append(Panel(name=name, missing=False, points=len(kept),
                            path=_path(px_of(kept.rows), py, kept.breaks),
                            y_low=_label(lo), y_high=_label(hi)))
    count = int(windows.shape[0])
    merged = count > MAX_RECTS
    shown = window_runs(windows) if merged else windows
    rects: list[tuple[float, float]] = []
    if rows > 0 and shown.shape[0]:
        x0 = px_of(shown[:, 0])
        x1 = px_of(np.maximum(shown[:, 1] - 1, shown[:, 0]))
        rects = [(round(a, 1), round(max(b - a, 1.0), 1))
                 for a, b in zip(x0.tolist(), x1.tolist(), strict=True)]
    return SegmentPlot(
        panels=tuple(panels), x_label=time_name if use_time else "row",
        x_low=_label(x_low), x_high=_label(x_high), rects=tuple(rects), windows=count,
        merged=merged)
