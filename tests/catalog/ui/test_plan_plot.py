"""The plan plot as geometry, from a real plan of a real (small) dataset: every window of
the streams shown is counted and drawn where it lies, the drawing stays within its bound
however many windows the plan has, and past it the windows' rows are drawn in one
colour."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

from windpipe.catalog import plans, service
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.ui.plan_plot import BUCKETS, CLASSES, MAX_RECTS, draw_plan
from windpipe.migrations import upgrade_engine
from windpipe.services.contract.configs import PlanSpec, ValidationConfig
from windpipe.services.database import create_engine
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.synth import write_synthetic_dataset

RECT = re.compile(r"M([0-9.]+) ([0-9.]+)h([0-9.]+)v")


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlanArtifact]:
    """A shuffled plan of short windows (T = 4) over 2 cells' cycles: thousands of
    windows in random batch order."""
    base = tmp_path_factory.mktemp("plan-plot")
    data = write_synthetic_dataset(base / "data", cells=2, cycles=2, rows_per_cycle=2000,
                                   zarr_fraction=0.0, split_fraction=0.0, seed=4)
    engine = create_engine(f"sqlite:///{base / 'c.db'}")
    upgrade_engine(engine)
    try:
        ctx = CatalogContext.from_engine(engine)
        version = service.register_version(ctx, "d", root=str(data.path),
                                           manifest=data.manifest_path.name).value
        split = service.create_split(ctx, version.id, ValidationConfig(
            strategy="sample", fraction=0.2, seed=1)).value
        plan = plans.create_plan(ctx, split.id, PlanSpec.model_validate({
            "strategy": "shuffled", "default_window": {"batch_size": 8, "seq_len": 4},
            "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}))
        yield plans.load_artifact(ctx, plan.value.id)
    finally:
        engine.dispose()


def _rects(path: str) -> list[tuple[float, float, float]]:
    return [(float(x), float(y), float(w)) for x, y, w in RECT.findall(path)]


def test_every_window_is_counted_and_the_drawing_bounded(shuffled: PlanArtifact):
    schedule = shuffled.epoch_schedule(0)
    plot = draw_plan(shuffled, schedule)
    real = (schedule.lane_stream >= 0) & (schedule.lane_offset >= 0)
    assert plot.windows == int(real.sum()) > 1000
    assert plot.batches == schedule.n_batches
    assert sum(b.batches for b in plot.bars) == schedule.n_batches
    assert len(plot.streams) == min(shuffled.streams.count, 40)
    rects = [r for _k, path in plot.layers for r in _rects(path)]
    assert 0 < len(rects) <= MAX_RECTS
    assert plot.coloured
    assert {k for k, _ in plot.layers} <= set(range(CLASSES))
    # a shuffled plan reads every row of a stream: its row is covered end to end
    col_w = plot.plot_width / BUCKETS
    for row in plot.streams:
        covered = sorted((x, x + w) for x, y, w in rects if abs(y - (row.y + 2)) < 0.05)
        assert covered, row
        assert covered[0][0] == pytest.approx(plot.left, abs=0.05)
        reach = max(b for _a, b in covered)
        assert reach >= plot.left + row.width - col_w


def test_past_the_bound_the_windows_are_one_colour(shuffled: PlanArtifact):
    schedule = shuffled.epoch_schedule(0)
    coloured = draw_plan(shuffled, schedule)
    merged = draw_plan(shuffled, schedule, max_rects=10)
    assert not merged.coloured
    assert [k for k, _ in merged.layers] == [-1]
    rects = _rects(merged.layers[0][1])
    assert len(rects) == len(merged.streams)  # each stream's windows: one run of rows
    assert merged.windows == coloured.windows
    ys = np.asarray([y for _x, y, _w in rects])
    assert np.all(np.diff(ys) > 0)  # one per stream, in order
