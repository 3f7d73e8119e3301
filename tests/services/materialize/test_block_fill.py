"""A block filled in runs, on threads, equals the rows of its streams read straight from the
files; runs are cut where they must be; a segment changed under a fill is reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.fixtures.data import write_parquet_segment
from tests.flight_server.helpers import Dataset, StreamSpec, write_dataset
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec, WindowConfig
from windpipe.services.contract.errors import SegmentChanged, SegmentError, WindpipeError
from windpipe.services.contract.wire import INPUT_PAD
from windpipe.services.materialize import block_fill
from windpipe.services.materialize.block_fill import fill_block
from windpipe.services.materialize.blocks import BlockLayout, block_layouts
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.storage.store import Storage

SPECS = [
    StreamSpec("cycling", "c1", 1, (37, 50, 3)),
    StreamSpec("cycling", "c1", 2, (1,)),
    StreamSpec("cycling", "c2", 1, (64, 64)),
    StreamSpec("cycling", "c3", 1, (20,), float32=True),  # another schema: float32 columns
    StreamSpec("hppc", "c1", 1, (45,)),
]
INPUTS: dict[str, tuple[str, ...]] = {"cycling": ("current_a", "voltage_v"),
                                      "hppc": ("current_a", "voltage_v")}
TARGETS: dict[str, tuple[str, ...]] = {"cycling": ("voltage_v",), "hppc": ("voltage_v",)}
SCALING = (ScalingSpec(column="current_a", input_min=-3, input_max=8),
           ScalingSpec(column="voltage_v", input_min=0.0, input_max=6.0, clip=True))


def _plan(ds: Dataset) -> PlanContext:
    config = LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=SCALING,
                          default_window=WindowConfig(batch_size=2, seq_len=4))
    return ds.plan(config, plan_id="fill")


def _expected(ds: Dataset, plan: PlanContext, layout: BlockLayout,
              ) -> tuple[np.ndarray, np.ndarray]:
    """The block straight from the files: each stream's rows scaled by SEMANTICS 5."""
    spec = plan.specs[layout.protocol]
    inputs = np.empty((layout.rows, layout.c_in), np.float32)
    targets = np.empty((layout.rows, layout.c_out), np.float32)
    for s in np.flatnonzero(layout.row0 >= 0).tolist():
        r0, n = int(layout.row0[s]), int(plan.streams.n_rows[s])
        for c, name in enumerate(spec.input_columns):
            y = next(x for x in SCALING if x.column == name).forward(ds.data[s][name])
            inputs[r0:r0 + n, c] = np.where(np.isfinite(y), y, INPUT_PAD)
        for c, name in enumerate(spec.target_columns):
            targets[r0:r0 + n, c] = next(
                x for x in SCALING if x.column == name).forward(ds.data[s][name])
    return inputs, targets


def _fill(plan: PlanContext, layout: BlockLayout, *, threads: int,
          ) -> tuple[np.ndarray, np.ndarray, int, list[tuple[int, int]]]:
    storage = Storage.from_uri(plan.root_uri)
    rows = np.full((layout.rows, layout.c_in + layout.c_out), 7.0, np.float32)
    steps: list[tuple[int, int]] = []
    read = fill_block(plan, storage, layout, rows, threads=threads,
                      progress=lambda k, b: steps.append((k, b)))
    return rows[:, :layout.c_in], rows[:, layout.c_in:], read, steps


@pytest.mark.parametrize("fmt", ["parquet", "mixed"])
@pytest.mark.parametrize("threads", [1, 3])
def test_fill_equals_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str,
                               threads: int) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt=fmt, chunk_rows=16, seed=4)
    plan = _plan(ds)
    monkeypatch.setattr(block_fill, "RUN_ROWS", 40)  # several runs a block
    monkeypatch.setattr(block_fill, "THREAD_CHUNK_ROWS", 1)  # threads even for small chunks
    for layout in block_layouts(plan):
        inputs, targets, read, steps = _fill(plan, layout, threads=threads)
        want_in, want_tg = _expected(ds, plan, layout)
        np.testing.assert_array_equal(inputs, want_in)
        np.testing.assert_array_equal(targets, want_tg)
        n_cols = len(plan.specs[layout.protocol].read_columns)
        assert read == layout.rows * n_cols * 8  # float64 bytes of the columns read
        assert len(steps) > 1  # several runs, reported in order, ending at the block's end
        assert [k for k, _ in steps] == sorted(k for k, _ in steps)
        assert steps[-1][0] == layout.chunks.shape[0]


def test_runs_cut_at_spec_rows_and_budget(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, chunk_rows=16, seed=4)
    plan = _plan(ds)
    layout = block_layouts(plan)[0]
    rows = plan.chunk_len[layout.chunks]
    monkeypatch.setattr(block_fill, "RUN_ROWS", 40)
    runs = block_fill._runs(plan, layout, rows, one_chunk=False)
    assert [r.first for r in runs] == [0, *[r.stop for r in runs[:-1]]]
    assert runs[-1].stop == layout.chunks.shape[0]
    for run in runs:
        assert run.rows == int(rows[run.first:run.stop].sum())
        assert run.row == int(layout.chunk_row[run.first])
        assert run.rows <= 40 or run.stop == run.first + 1  # one chunk may exceed the budget
    assert len(runs) > 1
    # an object store reads one chunk a run (the read-ahead's order)
    single = block_fill._runs(plan, layout, rows, one_chunk=True)
    assert [r.stop - r.first for r in single] == [1] * layout.chunks.shape[0]


def test_a_segment_changed_under_the_fill_is_named(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=4)
    plan = _plan(ds)
    layout = block_layouts(plan)[0]
    victim = plan.streams.piece_path[int(plan.chunk_piece[layout.chunks[3]])]
    write_parquet_segment(ds.root, victim, {"current_a": pa.array([1.0, 2.0]),
                                            "voltage_v": pa.array([3.0, 4.0])},
                          row_group_rows=16)
    with pytest.raises((SegmentChanged, SegmentError, WindpipeError)) as err:
        _fill(plan, layout, threads=3)
    assert victim in str(err.value)
