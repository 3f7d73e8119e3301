"""The split plot and the histograms as geometry: bounded however many groups, every
group's rows counted once on its side, the stored bins drawn as they are."""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from windpipe.catalog.ui.split_plot import (
    HIST_WIDTH,
    LABELLED_GROUPS,
    MAX_BINS,
    draw_histogram,
    draw_split,
)
from windpipe.services.contract.stats import ColumnStats, Histogram


def _index(cells: int, cycles: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = cells * cycles
    side = np.where(rng.random(cells) < 0.2, "val", "train")  # whole cells held out
    return pl.DataFrame({
        "set_id": ["s0"] * n,
        "cell_id": np.repeat([f"c{i:05d}" for i in range(cells)], cycles),
        "cidx": np.tile(np.arange(cycles), cells),
        "row_count": rng.integers(1, 500, n),
        "split": np.repeat(side, cycles),
    })


def _heights(path: str) -> list[float]:
    return [float(h) for h in re.findall(r"v(-?[0-9.]+)h", path)]


def test_many_groups_are_binned_and_every_row_counted():
    frame = _index(cells=3000, cycles=20)  # 60,000 groups
    plot = draw_split(frame, group_by=("set_id", "cell_id", "cidx"))
    assert plot.groups == 60_000
    assert plot.bins == MAX_BINS
    assert plot.labelled == ()
    for side in plot.sides:
        want = frame.filter(pl.col("split") == side.side)
        assert side.groups == want.height
        assert side.rows == int(want["row_count"].sum())
        assert side.path.count("M") <= MAX_BINS  # one rectangle a column at most
        assert all(0 < h <= plot.plot_height + 0.05 for h in _heights(side.path))


def test_few_groups_get_one_labelled_bar_each():
    frame = _index(cells=4, cycles=3, seed=2)
    plot = draw_split(frame, group_by=("cell_id",))
    assert plot.groups == 4 <= LABELLED_GROUPS
    assert [b.label for b in plot.labelled] == ["c00000", "c00001", "c00002", "c00003"]
    for bar in plot.labelled:
        want = frame.filter(pl.col("cell_id") == bar.label)
        assert bar.rows == int(want["row_count"].sum())
        assert bar.side == want["split"][0]


def test_a_histogram_draws_its_nonempty_bins_and_marks():
    stats = ColumnStats(protocol="cycling", column="v", rows=10, count=10, nulls=0,
                        non_finite=0, min=0.0, max=4.0, mean=1.0, p1=0.0, p99=4.0,
                        histogram=Histogram(edges=[0.0, 1.0, 2.0, 3.0, 4.0],
                                            counts=[5, 0, 3, 2]))
    drawn = draw_histogram(stats)
    assert drawn is not None
    assert drawn.bins == 4
    assert drawn.path.count("M") == 3  # the empty bin draws nothing
    assert drawn.mean_x is not None
    assert drawn.p1_x == 1.0
    assert drawn.p99_x == HIST_WIDTH - 1
    assert 1.0 < drawn.mean_x < drawn.p99_x
    no_bins = stats.model_copy(update={"histogram": None})
    assert draw_histogram(no_bins) is None
