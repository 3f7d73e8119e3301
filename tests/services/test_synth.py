"""The synthetic dataset: deterministic, physically plausible, both formats, nulls, splits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from windpipe.services.storage.segments import inspect_segment, read_rows
from windpipe.services.storage.store import Storage
from windpipe.services.synth import PROTOCOL_COLUMNS, write_synthetic_dataset


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_data(tmp_path: Path):
    kw = {"cells": 2, "cycles": 3, "rows_per_cycle": 120, "zarr_fraction": 0.5}
    a = write_synthetic_dataset(tmp_path / "a", seed=1, **kw)
    b = write_synthetic_dataset(tmp_path / "b", seed=1, **kw)
    c = write_synthetic_dataset(tmp_path / "c", seed=2, **kw)
    assert _files(a.path) == _files(b.path)
    assert (a.n_rows, a.n_segments) == (b.n_rows, b.n_segments)
    assert _files(a.path)["manifest.parquet"] != _files(c.path)["manifest.parquet"]


def test_layout_manifest_and_dataset_json(synth_dataset):
    root = synth_dataset.path
    manifest = pl.read_parquet(synth_dataset.manifest_path)
    assert manifest.columns == [
        "set_id", "cell_id", "cidx", "protocol", "segment_path", "row_count",
        "chemistry", "nominal_capacity_ah", "ambient_temp_c",
    ]
    assert int(manifest.get_column("row_count").sum()) == synth_dataset.n_rows
    assert manifest.height == synth_dataset.n_segments
    assert set(manifest.get_column("protocol")) == {"cycling", "hppc", "eis"}
    assert manifest.get_column("set_id").n_unique() == 2
    paths = manifest.get_column("segment_path")
    assert paths.str.ends_with(".zarr").any()
    assert paths.str.ends_with(".parquet").any()
    per_identity = manifest.group_by("set_id", "cell_id", "cidx", "protocol").agg(
        pl.len().alias("n"), pl.col("chemistry").n_unique().alias("chem"),
        pl.col("ambient_temp_c").n_unique().alias("amb"))
    assert (per_identity.get_column("n") > 1).any()  # some streams are split
    assert (per_identity.get_column("chem") == 1).all()
    assert (per_identity.get_column("amb") == 1).all()
    info = json.loads((root / "dataset.json").read_text())
    assert info["sign_convention"] == "current positive on charge"
    assert info["units"]["voltage_v"] == "V"
    assert info["seed"] == 7
    first_pq = next(p for p in paths if p.endswith(".parquet"))
    meta = pq.ParquetFile(root / first_pq)
    col = meta.metadata.row_group(0).column(meta.schema_arrow.get_field_index("voltage_v"))
    assert "PLAIN_DICTIONARY" not in col.encodings
    assert "RLE_DICTIONARY" not in col.encodings
    assert str(meta.schema_arrow.field("voltage_v").type) == "float"


def _stream(storage: Storage, manifest: pl.DataFrame, protocol: str, cidx: int,
            cell: str) -> dict[str, np.ndarray]:
    rows = manifest.filter(pl.col("protocol") == protocol, pl.col("cidx") == cidx,
                           pl.col("cell_id") == cell)
    parts = []
    for path in rows.get_column("segment_path"):
        info = inspect_segment(storage, path)
        parts.append(read_rows(storage, info, 0, info.row_count, PROTOCOL_COLUMNS[protocol]))
    return {c: np.concatenate([p[c] for p in parts]) for c in PROTOCOL_COLUMNS[protocol]}


def test_physics_is_plausible(synth_dataset):
    storage = Storage.from_uri(synth_dataset.path.as_uri())
    manifest = pl.read_parquet(synth_dataset.manifest_path)
    cyc = _stream(storage, manifest, "cycling", 0, "cell_000")
    assert np.all(np.diff(cyc["time_s"]) > 0)
    np.testing.assert_allclose(np.diff(cyc["time_s"]), cyc["dt_s"][1:], rtol=1e-4)
    n = cyc["soc_pct"].size
    charge = slice(0, int(0.35 * n))
    assert np.nanmin(cyc["current_a"][charge]) > 0  # positive on charge
    assert np.all(np.diff(cyc["soc_pct"][charge]) > 0)
    assert np.nanmin(cyc["current_a"][-int(0.4 * n):-int(0.06 * n)]) < 0
    assert np.nanmin(cyc["soc_pct"]) > 0
    assert np.nanmax(cyc["soc_pct"]) <= 100
    assert np.nanmin(cyc["voltage_v"]) > 2.0
    assert np.nanmax(cyc["voltage_v"]) < 4.5
    total_nulls = sum(int(np.isnan(v).sum()) for v in cyc.values())
    assert total_nulls < 0.05 * n * len(cyc)

    early = _stream(storage, manifest, "eis", 0, "cell_000")
    late = _stream(storage, manifest, "eis", 4, "cell_000")
    assert 40 <= early["freq_hz"].size <= 60
    assert np.all(np.diff(early["freq_hz"]) < 0)
    # resistance grows with age: the high-frequency real part rises
    assert np.nanmin(late["z_real_ohm"]) > np.nanmin(early["z_real_ohm"])

    hppc = _stream(storage, manifest, "hppc", 0, "cell_000")
    assert np.nanmax(hppc["current_a"]) > 0 > np.nanmin(hppc["current_a"])
    assert hppc["soc_pct"][-1] < hppc["soc_pct"][0] - 50


def test_large_rows_per_cycle_is_fast_and_uses_big_row_groups(tmp_path: Path):
    result = write_synthetic_dataset(tmp_path / "big", cells=1, cycles=2, rows_per_cycle=200_000,
                                     zarr_fraction=0.0, split_fraction=0.0,
                                     row_group_rows=131072)
    assert result.n_rows >= 400_000
    first = pl.read_parquet(result.manifest_path).get_column("segment_path")[0]
    assert pq.ParquetFile(result.path / first).metadata.num_row_groups == 2


def test_sparse_protocols_and_a_cell_without_a_sensor(tmp_path: Path):
    result = write_synthetic_dataset(tmp_path, cells=2, cycles=4, rows_per_cycle=60,
                                     hppc_every=3, eis_every=4,
                                     missing_channel="temperature_c", missing_cells=1)
    manifest = pl.read_parquet(result.manifest_path)
    cycles = {p: sorted(set(manifest.filter(pl.col("protocol") == p)["cidx"].to_list()))
              for p in ("cycling", "hppc", "eis")}
    assert cycles == {"cycling": [0, 1, 2, 3], "hppc": [0, 3], "eis": [0]}
    storage = Storage.from_uri(tmp_path.resolve().as_uri())
    for cell, protocol, path in manifest.select("cell_id", "protocol", "segment_path").rows():
        names = {c.name for c in inspect_segment(storage, path).columns}
        if protocol != "eis":
            assert ("temperature_c" in names) == (cell == "cell_000"), (cell, path)
            assert "voltage_v" in names
    info = json.loads((tmp_path / "dataset.json").read_text())
    assert info["parameters"]["missing_cells"] == 1


def test_missed_tests_leave_an_irregular_subset_of_cycles(tmp_path: Path):
    kept = write_synthetic_dataset(tmp_path / "all", cells=3, cycles=8, rows_per_cycle=60,
                                   hppc_every=2, eis_every=1)
    some = write_synthetic_dataset(tmp_path / "some", cells=3, cycles=8, rows_per_cycle=60,
                                   hppc_every=2, eis_every=1, missed_tests=0.5)

    def tests_of(result: Any, protocol: str) -> set[tuple[str, int]]:
        frame = pl.read_parquet(result.manifest_path).filter(pl.col("protocol") == protocol)
        return set(frame.select("cell_id", "cidx").iter_rows())

    for protocol in ("hppc", "eis"):
        every, left = tests_of(kept, protocol), tests_of(some, protocol)
        assert left < every  # only scheduled tests, some of them missed
        assert len(left) >= len(every) // 5
    # missed tests differ between cells: the cycles covered are not one pattern
    eis = tests_of(some, "eis")
    by_cell = {c: {k for cell, k in eis if cell == c} for c, _ in eis}
    assert len({frozenset(v) for v in by_cell.values()}) > 1
    assert tests_of(some, "cycling") == tests_of(kept, "cycling")
    with pytest.raises(ValueError, match="missed_tests"):
        write_synthetic_dataset(tmp_path / "bad", missed_tests=1.5)
