"""Min/max downsampling of one channel, so a segment of millions of rows draws as a few
thousand points.

The rows are cut into ``max_points // 2`` equal buckets (sizes differing by at most one
row) and each bucket keeps two points: its smallest and its largest finite value, at the
rows where they occur, in row order. The drawn line therefore reaches every extreme the
full series reaches (a spike of one row is never averaged away), which is what a person
looks for in a battery signal, and the cost is a few passes of numpy over the column
(the buckets gathered as the rows of one table, ``argmin`` and ``argmax`` along them):
no Python loop over rows or buckets. A bucket without a finite value keeps no point, so
a run of nulls shows as a gap in the line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_MAX_POINTS", "Downsampled", "minmax_downsample"]

DEFAULT_MAX_POINTS = 2000
"""The most points a channel is drawn with (two per bucket)."""


@dataclass(frozen=True, eq=False)
class Downsampled:
    """The points kept: ``rows`` (int64, increasing) and their ``values`` (float64,
    finite); ``breaks`` (bool) is True where a line starts anew, after a gap of nulls
    (always on the first point); ``buckets`` is how many buckets the rows were cut into
    (0: every finite row was kept as is)."""

    rows: np.ndarray
    values: np.ndarray
    breaks: np.ndarray
    buckets: int

    def __len__(self) -> int:
        return int(self.rows.shape[0])


def minmax_downsample(values: np.ndarray, *, max_points: int = DEFAULT_MAX_POINTS,
                      ) -> Downsampled:
    """At most ``max_points`` points of ``values`` (one channel, NaN for null): every
    finite row when they fit, else each bucket's minimum and maximum (see the module
    docstring). ``max_points`` must be at least 2."""
    if max_points < 2:
        msg = f"max_points must be >= 2, got {max_points}"
        raise ValueError(msg)
    y = np.asarray(values, dtype=np.float64)
    n = int(y.shape[0])
    finite = np.isfinite(y)
    if n <= max_points:
        rows = np.flatnonzero(finite).astype(np.int64)
        return Downsampled(rows=rows, values=y[rows], breaks=_breaks(rows), buckets=0)
    buckets = max_points // 2
    starts = (np.arange(buckets, dtype=np.int64) * n) // buckets  # equal cuts, none empty
    sizes = np.diff(np.append(starts, n))
    width = int(sizes.max())
    # every bucket as a row of one [buckets, width] table (a short bucket's last cell
    # repeats its last row, which changes neither its minimum nor where it first is)
    at = starts[:, None] + np.minimum(np.arange(width, dtype=np.int64)[None, :],
                                      (sizes - 1)[:, None])
    table = y[at]
    ok = np.isfinite(table)
    first_min = np.argmin(np.where(ok, table, np.inf), axis=1)
    first_max = np.argmax(np.where(ok, table, -np.inf), axis=1)
    has = ok.any(axis=1)  # a bucket with a finite value
    at_min = starts + first_min
    at_max = starts + first_max
    first = np.minimum(at_min, at_max)[has]
    second = np.maximum(at_min, at_max)[has]
    rows = np.stack([first, second], axis=1).reshape(-1)
    bucket = np.repeat(np.flatnonzero(has).astype(np.int64), 2)
    distinct = np.concatenate([[True], np.diff(rows) != 0])  # min and max on one row
    rows, bucket = rows[distinct], bucket[distinct]
    return Downsampled(rows=rows, values=y[rows], breaks=_breaks(bucket), buckets=buckets)


def _breaks(steps: np.ndarray) -> np.ndarray:
    """True on the first point and after every jump of more than one in ``steps``
    (rows, or buckets): the points a line does not join to the one before."""
    out = np.ones(steps.shape[0], dtype=np.bool_)
    out[1:] = np.diff(steps) > 1
    return out
