"""The segment plot's min/max downsampling against a plain per-bucket reference, and the
plot geometry built on it (points bounded, gaps kept, windows drawn or merged)."""

from __future__ import annotations

import numpy as np
import pytest

from windpipe.catalog.ui.downsample import DEFAULT_MAX_POINTS, minmax_downsample
from windpipe.catalog.ui.plot import MAX_RECTS, draw_segment, window_runs


def _reference(values: np.ndarray, max_points: int) -> tuple[list[int], list[float]]:
    """Bucket by bucket in plain Python: the first row of each bucket's finite minimum
    and of its finite maximum, in row order, a row kept once."""
    n = len(values)
    if n <= max_points:
        rows = [i for i in range(n) if np.isfinite(values[i])]
        return rows, [float(values[i]) for i in rows]
    buckets = max_points // 2
    kept: list[int] = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        finite = [i for i in range(lo, hi) if np.isfinite(values[i])]
        if not finite:
            continue
        low = min(values[i] for i in finite)
        high = max(values[i] for i in finite)
        at_low = next(i for i in finite if values[i] == low)
        at_high = next(i for i in finite if values[i] == high)
        for i in sorted({at_low, at_high}):
            kept.append(i)
    return kept, [float(values[i]) for i in kept]


@pytest.mark.parametrize(("n", "max_points"), [
    (0, 2000), (1, 2000), (1999, 2000), (2000, 2000), (2001, 2000), (12_345, 2000),
    (100_003, 2000), (50, 7), (1000, 2), (997, 10),
])
def test_matches_the_per_bucket_reference(n: int, max_points: int):
    rng = np.random.default_rng(n + max_points)
    values = rng.normal(size=n).cumsum()
    if n > 10:
        values[rng.choice(n, size=n // 10, replace=False)] = np.nan  # nulls
        values[n // 3: n // 3 + n // 5] = np.nan  # a long gap
        values[rng.choice(n, size=3, replace=False)] = np.inf  # never drawn
        values[n // 2] = 1e6  # a one-row spike survives
    got = minmax_downsample(values, max_points=max_points)
    rows, kept = _reference(values, max_points)
    assert got.rows.tolist() == rows
    assert got.values.tolist() == kept
    assert len(got) <= max_points
    if n > 10:
        assert 1e6 in got.values.tolist()


def test_ties_and_constant_buckets_keep_one_point():
    values = np.ones(10_000)
    got = minmax_downsample(values, max_points=100)
    assert got.rows.tolist() == (np.arange(50) * 10_000 // 50).tolist()  # first row each


def test_breaks_start_a_new_line_after_a_gap():
    values = np.arange(10.0)
    values[3:6] = np.nan
    got = minmax_downsample(values, max_points=100)
    assert got.rows.tolist() == [0, 1, 2, 6, 7, 8, 9]
    assert got.breaks.tolist() == [True, False, False, True, False, False, False]
    big = np.arange(100_000.0)
    big[40_000:60_000] = np.nan
    down = minmax_downsample(big, max_points=1000)
    assert int(down.breaks.sum()) == 2  # the first point and the one after the gap


def test_refuses_fewer_than_two_points():
    with pytest.raises(ValueError, match="max_points"):
        minmax_downsample(np.zeros(5), max_points=1)


def test_window_runs_are_the_union():
    windows = np.asarray([[10, 20], [0, 5], [15, 30], [40, 41], [30, 35]], dtype=np.int64)
    assert window_runs(windows).tolist() == [[0, 5], [10, 35], [40, 41]]
    assert window_runs(np.zeros((0, 2), dtype=np.int64)).shape == (0, 2)


def test_plot_bounds_points_draws_windows_and_marks_missing():
    n = 50_000
    time = np.arange(n, dtype=np.float64) * 0.5
    windows = np.asarray([[i, i + 64] for i in range(0, 640, 64)], dtype=np.int64)
    plot = draw_segment([("voltage_v", np.sin(time)), ("temperature_c", None)], rows=n,
                        time=time, time_name="time_s", windows=windows)
    volt, temp = plot.panels
    assert 0 < volt.points <= DEFAULT_MAX_POINTS
    assert volt.path.count("M") + volt.path.count("L") == volt.points
    assert temp.missing
    assert temp.path == ""
    assert plot.x_label == "time_s"
    assert len(plot.rects) == 10
    assert not plot.merged
    many = np.asarray([[i, i + 2] for i in range(0, 4 * (MAX_RECTS + 1), 4)], dtype=np.int64)
    merged = draw_segment([("v", time)], rows=n, time=None, time_name="time_s", windows=many)
    assert merged.merged
    assert merged.windows == MAX_RECTS + 1
    assert len(merged.rects) == MAX_RECTS + 1  # disjoint windows stay disjoint runs
    assert merged.x_label == "row"
