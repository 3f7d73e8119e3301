"""Server-drawn SVG of a split: how its groups fell (the SDK's ``Split.plot()``) and each
statistic's histogram (``SplitStats.plot()``), as geometry its template writes out.

The split plot has one bar per group (the ``group_by`` tuples of the split's config),
in key order, its length the group's rows, its colour its side. Up to
:data:`LABELLED_GROUPS` groups, each is a labelled bar; past that (a 100,000-segment
collection has tens of thousands of groups) the groups are cut, in key order, into at
most :data:`MAX_BINS` equal runs, and each run is one column: its train rows stacked
on its val rows. A side is one ``<path>`` of rectangles, so the page's size is bounded
by the bins, not the groups. The totals beside it are the groups and rows per side.

A histogram is the stored fixed bins of the statistics (their counts over
``[min, max]``), one ``<path>`` of bars, with the mean and the p1 / p99 quantiles
marked. Only numbers go into the paths; every name is written by the template, escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from windpipe.services.contract.stats import ColumnStats

__all__ = [
    "HIST_HEIGHT",
    "HIST_WIDTH",
    "LABELLED_GROUPS",
    "MAX_BINS",
    "HistogramPlot",
    "SideBars",
    "SplitPlot",
    "draw_histogram",
    "draw_split",
]

LABELLED_GROUPS = 40
MAX_BINS = 400
WIDTH, LEFT, RIGHT, TOP, BOTTOM = 720, 10, 10, 10, 24
BINNED_HEIGHT = 180
ROW_HEIGHT = 16
HIST_WIDTH, HIST_HEIGHT = 160, 36
SIDE_ORDER = ("train", "val")


@dataclass(frozen=True)
class LabelledBar:
    """One group's bar (labelled mode): its label, side, rows and geometry."""

    label: str
    side: str
    rows: int
    y: float
    width: float


@dataclass(frozen=True)
class SideBars:
    """One side's rectangles as one path, with its totals."""

    side: str
    path: str
    groups: int
    rows: int
    manifest_rows: int


@dataclass(frozen=True)
class SplitPlot:
    """The split plot: ``labelled`` bars (few groups) or ``sides`` paths (binned),
    the grouping keys, the unit of the bars and the figure's size."""

    keys: tuple[str, ...]
    groups: int
    bins: int
    labelled: tuple[LabelledBar, ...]
    sides: tuple[SideBars, ...]
    max_rows: int
    width: int
    height: int
    left: int
    top: int
    plot_width: int
    plot_height: int
    label_width: int


def _rect(x: float, y: float, w: float, h: float) -> str:
    return f"M{x:.1f} {y:.1f}h{w:.1f}v{h:.1f}h{-w:.1f}Z"


def _group_rows(frame: pl.DataFrame, group_by: Sequence[str]) -> tuple[list[str], pl.DataFrame]:
    """Per group (in key order): its side and rows (manifest rows without row counts)."""
    keys = [c for c in group_by if c in frame.columns] or ["split"]
    weight = pl.col("row_count").sum() if "row_count" in frame.columns else pl.len()
    by = keys if "split" in keys else [*keys, "split"]
    groups = (frame.lazy().select(*by, *(["row_count"] if "row_count" in frame.columns else []))
              .with_columns(pl.col("split").cast(pl.String).fill_null("unassigned"))
              .group_by(by)
              .agg(weight.cast(pl.Int64).alias("rows"), pl.len().alias("manifest_rows"))
              .sort(by, nulls_last=True).collect())  # lazy: half the time of eager here
    return keys, groups


def draw_split(frame: pl.DataFrame, *, group_by: Sequence[str]) -> SplitPlot:
    """The split plot of an assigned index ``frame`` (a ``split`` column) grouped by
    ``group_by`` (see the module docstring)."""
    keys, groups = _group_rows(frame, group_by)
    n = groups.height
    rows = groups.get_column("rows").to_numpy().astype(np.int64)
    side = groups.get_column("split").to_numpy()
    names = [s for s in SIDE_ORDER if s in set(side.tolist())]
    names += sorted(set(side.tolist()) - set(SIDE_ORDER))
    plot_w = WIDTH - LEFT - RIGHT
    totals = {s: (int((side == s).sum()), int(rows[side == s].sum()),
                  int(groups.filter(pl.col("split") == s)["manifest_rows"].sum()))
              for s in names}
    if n <= LABELLED_GROUPS:
        label_w = 220
        bar_w = plot_w - label_w
        top = int(rows.max()) if n else 1
        labels = [" / ".join(str(v) for v in r) for r in groups.select(keys).iter_rows()]
        bars = tuple(
            LabelledBar(label=labels[i], side=str(side[i]), rows=int(rows[i]),
                        y=TOP + i * ROW_HEIGHT, width=round(max(rows[i] / max(top, 1), 0.0)
                                                            * bar_w, 1))
            for i in range(n))
        sides = tuple(SideBars(side=s, path="", groups=totals[s][0], rows=totals[s][1],
                               manifest_rows=totals[s][2]) for s in names)
        return SplitPlot(keys=tuple(keys), groups=n, bins=n, labelled=bars, sides=sides,
                         max_rows=top, width=WIDTH, height=TOP + n * ROW_HEIGHT + BOTTOM,
                         left=LEFT, top=TOP, plot_width=bar_w, plot_height=n * ROW_HEIGHT,
                         label_width=label_w)
    bins = min(n, MAX_BINS)
    bin_of = (np.arange(n, dtype=np.int64) * bins) // n  # equal runs of groups, in order
    per_side = {s: np.bincount(bin_of[side == s], weights=rows[side == s],
                               minlength=bins) for s in names}
    stacked = np.zeros(bins)
    height = np.sum(list(per_side.values()), axis=0)
    tallest = float(height.max()) or 1.0
    plot_h = BINNED_HEIGHT - TOP - BOTTOM
    col_w = plot_w / bins
    sides_out = []
    for s in names:
        h = per_side[s] / tallest * plot_h
        parts = [_rect(LEFT + i * col_w, TOP + plot_h - stacked[i] - h[i], max(col_w, 0.6), h[i])
                 for i in np.flatnonzero(h > 0).tolist()]
        stacked = stacked + h
        sides_out.append(SideBars(side=s, path="".join(parts), groups=totals[s][0],
                                  rows=totals[s][1], manifest_rows=totals[s][2]))
    return SplitPlot(keys=tuple(keys), groups=n, bins=bins, labelled=(),
                     sides=tuple(sides_out), max_rows=int(tallest), width=WIDTH,
                     height=BINNED_HEIGHT, left=LEFT, top=TOP, plot_width=plot_w,
                     plot_height=plot_h, label_width=0)


@dataclass(frozen=True)
class HistogramPlot:
    """One column's histogram: its bars as one path, the x of its marks (None when the
    statistic is absent) and how many bins it has."""

    path: str
    bins: int
    mean_x: float | None
    p1_x: float | None
    p99_x: float | None
    width: int = HIST_WIDTH
    height: int = HIST_HEIGHT


def draw_histogram(stats: ColumnStats) -> HistogramPlot | None:
    """The stored histogram of ``stats`` drawn small; None when it has none."""
    hist = stats.histogram
    if hist is None or not hist.counts:
        return None
    counts = np.asarray(hist.counts, dtype=np.float64)
    edges = np.asarray(hist.edges, dtype=np.float64)
    lo, hi = float(edges[0]), float(edges[-1])
    span = hi - lo if hi > lo else 1.0
    top = float(counts.max()) or 1.0
    inner_h = HIST_HEIGHT - 2
    bin_w = (HIST_WIDTH - 2) / counts.shape[0]
    parts = []
    for i in np.flatnonzero(counts > 0).tolist():
        h = max(counts[i] / top * inner_h, 0.8)
        parts.append(_rect(1 + i * bin_w, 1 + inner_h - h, max(bin_w - 0.4, 0.4), h))

    def x_of(value: float | None) -> float | None:
        if value is None or not np.isfinite(value):
            return None
        return round(1 + (min(max(value, lo), hi) - lo) / span * (HIST_WIDTH - 2), 1)

    return HistogramPlot(path="".join(parts), bins=int(counts.shape[0]),
                         mean_x=x_of(stats.mean), p1_x=x_of(stats.p1), p99_x=x_of(stats.p99))
