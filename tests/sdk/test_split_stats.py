"""``split.stats()`` and fitted scaling end to end, against a real catalog and
Flight server: the statistics equal numpy over the train rows read straight from the
files (parquet and zarr, a missing channel, planted infinities); no validation row is
read; the values that reach a batch are ``(x - mean) / std`` of the file values."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import windpipe.sdk as sdk
from tests.fixtures.servers import embedded_services
from windpipe.sdk import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig
from windpipe.services.contract.stats import HISTOGRAM_BINS
from windpipe.services.synth import write_synthetic_dataset

Files = dict[str, dict[str, np.ndarray]]


def _read(root: Path, rel: str) -> dict[str, np.ndarray]:
    """A segment's columns as float64 (null -> NaN), read with pyarrow / zarr directly."""
    path = root / rel
    if rel.endswith(".zarr"):
        group = zarr.open_group(str(path), mode="r")
        return {n: np.asarray(a[...], dtype=np.float64) for n, a in group.arrays()}
    table = pq.read_table(path)
    return {n: np.asarray(table.column(n).cast(pa.float64()).to_numpy(zero_copy_only=False))
            for n in table.column_names}


def _plant_infinities(root: Path) -> None:
    """+inf and -inf in current_a of every parquet cycling segment (before registration)."""
    for path in sorted(root.glob("segments/**/cycling_*.parquet")):
        table = pq.read_table(path)
        values = table.column("current_a").to_numpy(zero_copy_only=False).copy()
        values[1], values[-1] = np.inf, -np.inf
        table = table.set_column(table.column_names.index("current_a"), "current_a",
                                 pa.array(values, type=pa.float32()))
        pq.write_table(table, path, row_group_size=64, use_dictionary=False)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stats") / "data"
    write_synthetic_dataset(root, cells=4, cycles=4, rows_per_cycle=240, seed=5,
                            zarr_fraction=0.4, split_fraction=0.4, row_group_rows=64,
                            hppc_every=2, missing_channel="temperature_c", missing_cells=1)
    _plant_infinities(root)
    return root


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    with embedded_services(tmp_path_factory.mktemp("stats-state")) as url:
        client = Catalog(url)
        yield client
        client.close()


def _side_values(split: sdk.Split, root: Path, side: str) -> dict[tuple[str, str], Any]:
    """Per (protocol, column): the side's values from the files, and its absent rows."""
    frame = split.index().frame.filter(pl.col("split") == side)
    values: dict[tuple[str, str], list[np.ndarray]] = {}
    absent: dict[tuple[str, str], int] = {}
    columns: dict[str, set[str]] = {}
    rows: list[tuple[str, dict[str, np.ndarray], int]] = []
    for protocol, paths, n in frame.select("protocol", "segment_paths", "row_count").iter_rows():
        parts = [_read(root, p) for p in paths]
        have = set(parts[0]) if parts else set()
        columns.setdefault(protocol, set()).update(have)
        rows.append((protocol, {c: np.concatenate([p[c] for p in parts]) for c in have}, n))
    for protocol, cols, n in rows:
        for column in columns[protocol]:
            key = (protocol, column)
            if column in cols:
                values.setdefault(key, []).append(cols[column])
            else:
                absent[key] = absent.get(key, 0) + n
    return {k: (np.concatenate(v), absent.get(k, 0)) for k, v in values.items()}


def _assert_equal_to_numpy(stats: sdk.SplitStats, reference: dict[tuple[str, str], Any],
                           ) -> None:
    assert {(e.protocol, e.column) for e in stats.stats} == set(reference)
    for e in stats.stats:
        raw, absent = reference[(e.protocol, e.column)]
        v = raw[np.isfinite(raw)]
        assert (e.rows, e.absent_rows, e.count) == (raw.size, absent, v.size), e
        assert (e.nulls, e.non_finite) == (int(np.isnan(raw).sum()), int(np.isinf(raw).sum()))
        assert (e.min, e.max) == (v.min(), v.max())
        assert [e.p1, e.p50, e.p99] == np.quantile(v, [0.01, 0.5, 0.99]).tolist()  # exact
        assert e.mean == pytest.approx(v.mean(), rel=1e-12, abs=1e-12)
        assert e.std == pytest.approx(v.std(), rel=1e-12, abs=1e-12)
        counts, edges = np.histogram(v, bins=HISTOGRAM_BINS, range=(v.min(), v.max()))
        assert e.histogram is not None
        assert e.histogram.counts == counts.tolist()
        np.testing.assert_allclose(e.histogram.edges, edges)


def test_statistics_equal_numpy_over_the_train_rows(cat: Catalog, data_root: Path) -> None:
    ver = cat.register("stats", root=data_root.as_uri(), manifest="manifest.parquet")
    split = ver.split(ValidationConfig.sample(fraction=0.3, seed=3))
    stats = split.stats()
    assert (stats.side, stats.columns, stats.split_id) == ("train", None, split.id)
    reference = _side_values(split, data_root, "train")
    _assert_equal_to_numpy(stats, reference)
    by = {(e.protocol, e.column): e for e in stats.stats}
    assert by[("cycling", "temperature_c")].absent_rows > 0  # the cell without the sensor
    assert by[("cycling", "current_a")].non_finite > 0  # the planted infinities
    assert by[("cycling", "current_a")].nulls > 0
    assert split.stats() == stats  # stored: the same answer
    val = split.stats(side="val")
    _assert_equal_to_numpy(val, _side_values(split, data_root, "val"))
    assert val.stats != stats.stats
    picked = split.stats(columns=["voltage_v", "current_a"])
    assert picked.columns == ["current_a", "voltage_v"]
    assert picked.stats == [e for e in stats.stats if e.column in ("current_a", "voltage_v")]
    frame = stats.frame
    assert frame.height == len(stats.stats)
    assert frame.filter(pl.col("column") == "current_a").get_column("mean").to_list() == [
        e.mean for e in stats.stats if e.column == "current_a"]
    text = repr(stats)
    for part in (f"SplitStats {split.id} [train]", "cycling.current_a", "absent_rows=",
                 "exact"):
        assert part in text
    assert "<table>" in stats._repr_html_()
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    fig = stats.plot(columns=("current_a", "voltage_v"))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [
        f"{e.protocol}: {e.column}" for e in stats.stats if e.column in ("current_a", "voltage_v")]


def _rewrite(root: Path, rel: str) -> None:
    """Every value of a segment changed (same shape, same names)."""
    path = root / rel
    if rel.endswith(".zarr"):
        group = zarr.open_group(str(path), mode="r+")
        for _name, arr in group.arrays():
            arr[...] = np.asarray(arr[...]) * 1000.0 + 7.0
        return
    table = pq.read_table(path)
    changed = pa.table({n: pa.compute.add(pa.compute.multiply(table.column(n), 1000), 7)
                        .cast(table.schema.field(n).type) for n in table.column_names})
    pq.write_table(changed, path, row_group_size=64, use_dictionary=False)


def test_validation_values_never_reach_train_statistics(cat: Catalog, data_root: Path,
                                                        tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(data_root, root)
    ver = cat.register("stats-leak", root=root.as_uri(), manifest="manifest.parquet")
    split = ver.split(ValidationConfig.sample(fraction=0.4, seed=11))
    before = _side_values(split, root, "train")
    val = split.index().filter_split("val").frame
    assert val.height > 0
    for paths in val.get_column("segment_paths").to_list():
        for rel in paths:
            _rewrite(root, rel)
    changed, original = _side_values(split, root, "val"), _side_values(split, data_root, "val")
    for key, (values, _absent) in changed.items():  # every finite validation value moved
        finite = np.isfinite(original[key][0])
        assert not np.isclose(values[finite], original[key][0][finite]).any(), key
    stats = split.stats()  # computed now, after every validation value changed
    _assert_equal_to_numpy(stats, before)
    with pytest.raises((sdk.SegmentChanged, sdk.SegmentError)):
        split.stats(side="val")  # reading a changed validation file is noticed


def _standardized(spec: ScalingSpec | None, x: np.ndarray) -> np.ndarray:
    if spec is None:
        return x
    assert spec.transform == "standard"
    assert spec.mean is not None
    assert spec.std is not None
    return (x - spec.mean) / spec.std


def _check(batch: sdk.Batch, config: LoaderConfig, root: Path, files: Files) -> int:
    """Every lane of a batch equals the file values it names, standardized by hand."""
    state = batch.state
    ins, outs = state.input_columns, state.target_columns
    b_lanes, t_len = batch.inputs.shape[0], batch.inputs.shape[1]
    want_in = np.full((b_lanes, t_len, len(ins)), -2.0)
    want_out = np.full((b_lanes, t_len, len(outs)), np.nan)
    for lane in range(b_lanes):
        for ref in state.segments_of(lane):
            cols = files.setdefault(ref.path, _read(root, ref.path))
            rows = np.arange(ref.window_row_start, ref.window_row_start + ref.row_count)
            for where, names, shift in ((want_in, ins, 0), (want_out, outs, 1)):
                for c, name in enumerate(names):
                    if name not in cols:
                        continue  # a missing channel: -2.0 / NaN
                    x = _standardized(config.scaling_for(name),
                                      cols[name][ref.row_start:ref.row_start + ref.row_count])
                    t = rows - shift
                    keep = (t >= 0) & (t < t_len)
                    fill = -2.0 if shift == 0 else np.nan
                    where[lane, t[keep], c] = np.where(np.isfinite(x[keep]), x[keep], fill)
    np.testing.assert_allclose(batch.inputs.numpy(), want_in, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.targets.numpy(), want_out, rtol=1e-5, atol=1e-5)
    return b_lanes


SHAPES: dict[str, dict[str, Any]] = {
    "sequential": {"default_window": WindowConfig(batch_size=3, seq_len=50)},
    "shuffled": {"strategy": "shuffled", "seed": 4,
                 "default_window": WindowConfig(batch_size=4, seq_len=32)},
    "stateful": {"stateful_n_windows": 2, "default_window": WindowConfig(batch_size=2, seq_len=40)},
    "aligned": {"align_by": "alignment_key",
                "default_window": WindowConfig(batch_size=3, seq_len=40),
                "window_by_protocol": {"hppc": WindowConfig(batch_size=3, seq_len=16)}},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_batches_carry_the_standardized_file_values(cat: Catalog, data_root: Path,
                                                    shape: str) -> None:
    ver = cat.register("stats", root=data_root.as_uri(), manifest="manifest.parquet")
    split = ver.split(ValidationConfig.sample(fraction=0.3, seed=3))
    stats = split.stats()
    config = LoaderConfig(
        inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("current_a",)},
        targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
        scaling=tuple(ScalingSpec.from_stats(stats, c, kind="standard",
                                             protocol=["cycling", "hppc"])
                      for c in ("current_a", "temperature_c", "voltage_v")),
        **SHAPES[shape])
    plan = split.plan(config)
    files: Files = {}
    lanes = 0
    for batch in plan.batches(epoch=1, transport="flight"):
        parts = batch.parts.values() if isinstance(batch, sdk.AlignedBatch) else [batch]
        for part in parts:
            lanes += _check(part, config, data_root, files)
    assert lanes > 0
    assert plan.id != split.plan(config.model_copy(update={"scaling": (
        ScalingSpec.from_stats(split.stats(side="val"), "current_a", kind="standard",
                               protocol=["cycling", "hppc"]), *config.scaling[1:])})).id
