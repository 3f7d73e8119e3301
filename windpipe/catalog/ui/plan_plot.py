"""Server-drawn SVG of a plan (the SDK's ``Plan.plot()``): its windows over its streams
and its batches per protocol, as geometry the plan page's template writes out.

The first :data:`MAX_STREAMS` streams are rows; each is a grey bar as long as its rows
and, over it, every epoch-0 lane window that reads it (input rows and the target row
after them), coloured by the batch it is in (early batches dark, late ones light, in
:data:`CLASSES` steps); where a window runs past its stream's end, the overrun is red
(padding). However many windows a plan has, each row is cut into :data:`BUCKETS`
columns and drawn as the runs of columns of one colour, computed with numpy over the
whole schedule at once; past :data:`MAX_RECTS` runs the windows are drawn in one colour
(the rows some window reads), so the page stays small. One ``<path>`` per colour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.schedule import Schedule

__all__ = ["BUCKETS", "CLASSES", "MAX_RECTS", "MAX_STREAMS", "PlanPlot", "draw_plan"]

MAX_STREAMS = 40
BUCKETS = 240
CLASSES = 6
MAX_RECTS = 1500
WIDTH, LABEL, RIGHT, TOP, BOTTOM, ROW = 900, 200, 10, 8, 22, 14
BAR_WIDTH, BAR_HEIGHT = 300, 120


@dataclass(frozen=True)
class StreamRow:
    """One stream's row: its label (the group key), rows, bar width and y."""

    index: int
    label: str
    rows: int
    y: float
    width: float


@dataclass(frozen=True)
class ProtocolBar:
    """Batches of one protocol in epoch 0 (an aligned plan: its parts)."""

    protocol: str
    batches: int
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class PlanPlot:
    """The plan plot: stream rows, the windows as one path per colour class
    (``layers``: ``(class, path)``; class -1 when drawn in one colour), padding, the
    protocol bars and the numbers the note states."""

    streams: tuple[StreamRow, ...]
    total_streams: int
    layers: tuple[tuple[int, str], ...]
    padding: str
    windows: int
    shown_windows: int
    coloured: bool
    x_max: int
    bars: tuple[ProtocolBar, ...]
    batches: int
    width: int = WIDTH
    left: int = LABEL
    top: int = TOP
    plot_width: int = WIDTH - LABEL - RIGHT
    row: int = ROW
    bar_width: int = BAR_WIDTH
    bar_height: int = BAR_HEIGHT

    @property
    def height(self) -> int:
        """The window plot's height."""
        return TOP + max(len(self.streams), 1) * ROW + BOTTOM


def _runs(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Runs of equal values along each row of ``grid`` (int ``[R, C]``) that are not -1:
    ``(row, first column, columns, value)``."""
    rows, cols = grid.shape
    change = np.ones_like(grid, dtype=np.bool_)
    change[:, 1:] = grid[:, 1:] != grid[:, :-1]
    r, c = np.nonzero(change)
    flat = r * cols + c
    ends = np.append(flat[1:], rows * cols)
    # a run ends at the next change or its row's end, whichever is first
    stop = np.minimum(ends, (r + 1) * cols)
    value = grid[r, c]
    keep = value >= 0
    return r[keep], c[keep], (stop - flat)[keep], value[keep]


def _path(rows: np.ndarray, cols: np.ndarray, spans: np.ndarray, *, col_w: float,
          left: float) -> str:
    return "".join(
        f"M{left + c * col_w:.1f} {TOP + r * ROW + 2:.1f}h{n * col_w:.1f}v{ROW - 4}"
        f"h{-n * col_w:.1f}Z"
        for r, c, n in zip(rows.tolist(), cols.tolist(), spans.tolist(), strict=True))


def draw_plan(artifact: PlanArtifact, schedule: Schedule, *,
              max_rects: int = MAX_RECTS) -> PlanPlot:
    """The plot of ``artifact``'s epoch ``schedule`` (see the module docstring); past
    ``max_rects`` runs of one colour, the windows in one colour."""
    streams = artifact.streams
    n_rows = np.asarray(streams.n_rows, dtype=np.int64)
    shown = min(int(streams.count), MAX_STREAMS)
    ptr = np.asarray(schedule.batch_lane_ptr, dtype=np.int64)
    n_batches = int(ptr.shape[0] - 1)
    per_lane = np.diff(ptr)
    lane_batch = np.repeat(np.arange(n_batches, dtype=np.int64), per_lane)
    lane_len = np.repeat(np.asarray(schedule.batch_seq_len, dtype=np.int64), per_lane)
    lane_stream = np.asarray(schedule.lane_stream, dtype=np.int64)
    lane_offset = np.asarray(schedule.lane_offset, dtype=np.int64)
    real = (lane_stream >= 0) & (lane_offset >= 0)
    on = real & (lane_stream < shown)
    ys, start = lane_stream[on], lane_offset[on]
    stop = start + lane_len[on] + 1  # the target row after the inputs
    x_max = int(max(n_rows[:shown].max(initial=1), stop.max(initial=1)))
    plot_w = WIDTH - LABEL - RIGHT
    col_w = plot_w / BUCKETS
    layers: list[tuple[int, str]] = []
    coloured = True
    if ys.shape[0]:
        ends = np.minimum(stop, n_rows[ys])
        b0 = np.minimum(start * BUCKETS // x_max, BUCKETS - 1)
        b1 = np.maximum(-(-ends * BUCKETS // x_max), b0 + 1)
        diff = np.zeros((shown, BUCKETS + 1), dtype=np.int64)
        np.add.at(diff, (ys, b0), 1)
        np.add.at(diff, (ys, b1), -1)
        covered = np.cumsum(diff, axis=1)[:, :BUCKETS] > 0
        cls = np.full((shown, BUCKETS), CLASSES, dtype=np.int64)
        np.minimum.at(cls, (ys, b0), lane_batch[on] * CLASSES // max(n_batches, 1))
        cols = np.where(cls < CLASSES, np.arange(BUCKETS), 0)
        last = np.maximum.accumulate(cols, axis=1)  # the last column where a window began
        filled = np.take_along_axis(cls, last, axis=1)
        grid = np.where(covered & (filled < CLASSES), filled, -1)
        r, c, n, v = _runs(grid)
        if r.shape[0] > max_rects:
            coloured = False
            r, c, n, v = _runs(np.where(covered, 0, -1))
            v = np.full_like(v, -1)
        for k in sorted(set(v.tolist())):
            sel = v == k
            layers.append((k, _path(r[sel], c[sel], n[sel], col_w=col_w, left=LABEL)))
    over = stop > n_rows[ys] if ys.shape[0] else np.zeros(0, dtype=np.bool_)
    pad = []
    for s in np.unique(ys[over]).tolist():
        a = float(n_rows[s]) / x_max * plot_w
        b = float(stop[over][ys[over] == s].max()) / x_max * plot_w
        pad.append(f"M{LABEL + a:.1f} {TOP + s * ROW + 2:.1f}h{max(b - a, 1.0):.1f}"
                   f"v{ROW - 4}h{-max(b - a, 1.0):.1f}Z")
    keys = streams.group_keys
    rows = tuple(StreamRow(index=i, label=" / ".join(str(v) for v in keys[i]),
                           rows=int(n_rows[i]), y=TOP + i * ROW,
                           width=round(float(n_rows[i]) / x_max * plot_w, 1))
                 for i in range(shown))
    codes = np.asarray(schedule.batch_protocol, dtype=np.int64)
    names = list(streams.protocols)
    counts = np.bincount(codes, minlength=len(names)) if codes.size else np.zeros(len(names))
    top = float(counts.max(initial=1)) or 1.0
    slot = (BAR_WIDTH - 20) / max(len(names), 1)
    bars = tuple(ProtocolBar(protocol=name, batches=int(counts[i]), x=round(10 + i * slot + 4, 1),
                             width=round(max(slot - 8, 2.0), 1),
                             height=round(float(counts[i]) / top * (BAR_HEIGHT - 40), 1),
                             y=round(BAR_HEIGHT - 20 - float(counts[i]) / top
                                     * (BAR_HEIGHT - 40), 1))
                 for i, name in enumerate(names))
    return PlanPlot(streams=rows, total_streams=int(streams.count), layers=tuple(layers),
                    padding="".join(pad), windows=int(real.sum()),
                    shown_windows=int(on.sum()), coloured=coloured, x_max=x_max, bars=bars,
                    batches=n_batches)
