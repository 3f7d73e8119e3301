"""Registration: every defect of a manifest is found, named by row, before anything is stored."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.data import write_manifest, write_parquet_segment, write_zarr_segment
from windpipe.catalog.manifest import load_manifest, manifest_from_rows
from windpipe.catalog.registration import prepare_version
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.identity import manifest_row_id
from windpipe.services.storage.segments import read_chunk
from windpipe.services.storage.store import Storage
from windpipe.services.synth import write_synthetic_dataset


def _cols(n: int, offset: float = 0.0) -> dict[str, np.ndarray]:
    return {
        "time_s": np.arange(n, dtype=np.float64) + offset,
        "voltage_v": np.full(n, 3.7, dtype=np.float32),
    }


def _row(cidx: int, path: str, *, protocol: str = "cycling", cell: str = "c1",
         **extra: Any) -> dict[str, Any]:
    return {"set_id": "s", "cell_id": cell, "cidx": cidx, "protocol": protocol,
            "segment_path": path, "chemistry": "nmc", **extra}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_parquet_segment(tmp_path, "a.parquet", _cols(50))
    write_parquet_segment(tmp_path, "b1.parquet", _cols(30))
    write_zarr_segment(tmp_path, "b2.zarr", _cols(20, 30.0), chunk_rows=8)
    write_parquet_segment(tmp_path, "c.parquet", _cols(40))
    return tmp_path


def _problems(storage: Storage, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with pytest.raises(WindpipeError) as info:
        prepare_version(storage, manifest_from_rows(rows))
    assert info.value.type == ErrorType.INVALID_MANIFEST
    problems = info.value.details["problems"]
    assert info.value.message.startswith(f"{len(problems)} problem")
    return problems


def test_good_manifest(root: Path):
    storage = Storage.from_uri(root.as_uri())
    rows = [
        _row(1, "c.parquet", row_count=40),
        _row(0, "a.parquet", row_count=50),
        _row(0, "b1.parquet", protocol="hppc"),
        _row(0, "b2.zarr", protocol="hppc", row_count=20),
    ]
    seen: list[tuple[int, int]] = []
    version = prepare_version(storage, manifest_from_rows(rows),
                              progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (4, 4)
    assert version.version_id.startswith("v-")
    assert len(version.version_id) == 34
    assert version.root_uri == storage.uri
    assert version.metadata_columns == ("chemistry",)
    mr = version.manifest_rows
    assert mr.columns == ["manifest_row_id", "set_id", "cell_id", "cidx", "protocol",
                          "chemistry", "row_count", "position"]
    assert mr.get_column("position").to_list() == [0, 1, 2]
    assert mr.get_column("row_count").to_list() == [40, 50, 50]
    assert mr.get_column("manifest_row_id").to_list()[2] == manifest_row_id("s", "c1", 0, "hppc")
    seg = version.segments
    hppc = seg.filter(pl.col("manifest_row_id") == manifest_row_id("s", "c1", 0, "hppc"))
    assert hppc.get_column("ordinal").to_list() == [0, 1]
    assert hppc.get_column("path").to_list() == ["b1.parquet", "b2.zarr"]
    assert hppc.get_column("format").to_list() == ["parquet", "zarr"]
    assert hppc.get_column("chunk_rows").to_list()[1] == [8, 8, 4]
    assert seg.get_column("manifest_position").to_list() == [0, 1, 2, 3]
    assert version.schema["hppc"] == [
        {"name": "time_s", "dtype": "double", "numeric": True},
        {"name": "voltage_v", "dtype": "float", "numeric": True},
    ]
    assert version.total_rows == 140
    info = version.segment_info(3)
    assert read_chunk(storage, info, 2, ["time_s"])["time_s"].tolist() == [46.0, 47.0, 48.0, 49.0]


def test_version_id_is_idempotent_and_content_based(root: Path, tmp_path_factory):
    storage = Storage.from_uri(root.as_uri())
    rows = [_row(0, "a.parquet"), _row(1, "c.parquet")]
    first = prepare_version(storage, manifest_from_rows(rows)).version_id
    again = prepare_version(storage, manifest_from_rows(rows)).version_id
    with_counts = prepare_version(
        storage, manifest_from_rows([_row(0, "a.parquet", row_count=50),
                                     _row(1, "c.parquet", row_count=40)])).version_id
    reordered = prepare_version(storage, manifest_from_rows(rows[::-1])).version_id
    assert first == again == with_counts == reordered
    other_meta = prepare_version(
        storage, manifest_from_rows([_row(0, "a.parquet"), _row(1, "c.parquet", chemistry="lfp")])
    ).version_id
    assert other_meta != first
    write_parquet_segment(root, "c.parquet", _cols(40, offset=1.0))
    assert prepare_version(storage, manifest_from_rows(rows)).version_id != first


def test_every_problem_is_reported_with_its_row(tmp_path: Path, root: Path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    write_parquet_segment(outside, "x.parquet", _cols(5))
    os.symlink(outside, root / "link")
    (root / "corrupt.parquet").write_bytes(b"PAR1 garbage")
    write_parquet_segment(root, "extra.parquet", {**_cols(10), "current_a": np.zeros(10)})
    write_parquet_segment(root, "typed.parquet", {
        "time_s": np.arange(10, dtype=np.float32), "voltage_v": np.zeros(10, np.float32)})
    write_zarr_segment(root, "uneven.zarr", {"time_s": np.zeros(3), "voltage_v": np.zeros(4)})
    storage = Storage.from_uri(root.as_uri())
    rows = [
        _row(0, "a.parquet", row_count=50),                  # 0 fine
        _row(1, "/abs/path.parquet"),                        # 1 absolute
        _row(2, "../up.parquet"),                            # 2 ..
        _row(3, "link/x.parquet"),                           # 3 symlink escape
        _row(4, "missing.parquet"),                          # 4 missing
        _row(5, "corrupt.parquet"),                          # 5 corrupt
        _row(6, "c.parquet", row_count=41),                  # 6 wrong row count
        _row(7, "extra.parquet"),                            # 7 extra column: fine
        _row(8, "typed.parquet"),                            # 8 other float type: fine
        _row(9, "a.parquet"),                                # 9 duplicate
        _row(10, "b1.parquet", chemistry="nmc"),             # 10 fine
        _row(10, "b2.zarr", chemistry="lfp"),                # 11 inconsistent metadata
        _row(12, "uneven.zarr"),                             # 12 zarr lengths differ
    ]
    problems = _problems(storage, rows)
    by_row: dict[int, list[str]] = {}
    for p in problems:
        by_row.setdefault(p["row"], []).append(p["problem"])
        assert p["segment_path"] == rows[p["row"]]["segment_path"]
    expected = {
        1: "is absolute",
        2: "contains '..'",
        3: "outside the storage root",
        4: "does not exist",
        5: "cannot be read|not a parquet|corrupt",
        6: "row_count is 41 in the manifest but the segment has 40 rows",
        9: "segment listed twice \\(first in row 0\\)",
        11: "metadata 'chemistry' is 'lfp' here but 'nmc' in row 10",
        12: "different lengths",
    }
    assert set(by_row) == set(expected)
    for row, pattern in expected.items():
        assert any(re.search(pattern, text) for text in by_row[row]), (
            row, by_row[row])
    assert [p["row"] for p in problems] == sorted(p["row"] for p in problems)


def test_segments_may_lack_columns_and_differ_in_numeric_type(root: Path):
    write_parquet_segment(root, "no_volt.parquet", {"time_s": np.arange(5, dtype=np.int32)})
    write_parquet_segment(root, "aux.parquet", {**_cols(6), "aux_v": np.ones(6)})
    storage = Storage.from_uri(root.as_uri())
    version = prepare_version(storage, manifest_from_rows([
        _row(0, "no_volt.parquet"), _row(1, "a.parquet"), _row(2, "aux.parquet"),
    ]))
    lacking_volt = manifest_row_id("s", "c1", 0, "cycling")
    others = sorted(manifest_row_id("s", "c1", i, "cycling") for i in (0, 1))
    assert version.schema["cycling"] == [
        {"name": "time_s", "dtype": "mixed(double|int32)", "numeric": True},
        {"name": "voltage_v", "dtype": "float", "numeric": True, "missing": [lacking_volt]},
        {"name": "aux_v", "dtype": "double", "numeric": True, "missing": others},
    ]
    assert [c.name for c in version.segment_info(0).columns] == ["time_s"]
    assert [c.name for c in version.segment_info(2).columns] == ["time_s", "voltage_v", "aux_v"]


def test_segments_of_one_manifest_row_hold_the_same_columns(root: Path):
    write_parquet_segment(root, "odd.parquet", {"time_s": np.zeros(5)})
    storage = Storage.from_uri(root.as_uri())
    problems = _problems(storage, [
        _row(0, "a.parquet"), _row(0, "odd.parquet"), _row(2, "c.parquet"),
    ])
    assert [p["row"] for p in problems] == [1]
    assert "missing columns ['voltage_v']" in problems[0]["problem"]
    assert "row 0 of the same manifest row" in problems[0]["problem"]


def test_same_column_set_in_other_protocol_is_independent(root: Path):
    write_parquet_segment(root, "eis.parquet", {"freq_hz": np.ones(5, np.float32)})
    storage = Storage.from_uri(root.as_uri())
    version = prepare_version(storage, manifest_from_rows([
        _row(0, "a.parquet"), _row(0, "eis.parquet", protocol="eis")]))
    assert set(version.schema) == {"cycling", "eis"}


def test_manifest_shape_errors_name_row_and_column(root: Path):
    with pytest.raises(WindpipeError, match="column 'cidx': required column is missing"):
        manifest_from_rows([{"set_id": "s", "cell_id": "c", "protocol": "eis",
                             "segment_path": "a.parquet"}])
    with pytest.raises(WindpipeError) as info:
        manifest_from_rows([
            _row(0, "a.parquet"),
            {**_row(1, "b.parquet"), "cidx": 1.5},
            {**_row(2, "c.parquet"), "protocol": "Cycling"},
            {**_row(3, "d.parquet"), "cell_id": None},
        ])
    problems = info.value.details["problems"]
    assert [(p["row"], p["column"]) for p in problems] == [
        (1, "cidx"), (2, "protocol"), (3, "cell_id")]
    assert "row 1, column 'cidx'" in info.value.message
    with pytest.raises(WindpipeError, match="reserved"):
        manifest_from_rows([_row(0, "a.parquet", position=3)])
    with pytest.raises(WindpipeError, match="no rows"):
        manifest_from_rows([])


def test_load_manifest_parquet_and_csv(root: Path):
    rows = [_row(0, "a.parquet", row_count=50), _row(1, "c.parquet", row_count=40)]
    write_manifest(root, rows)
    write_manifest(root, rows, name="manifest.csv")
    storage = Storage.from_uri(root.as_uri())
    from_pq = load_manifest(storage, "manifest.parquet")
    from_csv = load_manifest(storage, "manifest.csv")
    assert from_pq.equals(from_csv)
    assert from_pq.schema["cidx"] == pl.Int64
    assert prepare_version(storage, from_pq).version_id == prepare_version(
        storage, from_csv).version_id
    (root / "broken.parquet").write_bytes(b"nope")
    for path, pattern in [("broken.parquet", "cannot be read"), ("gone.csv", "does not exist"),
                          ("manifest.json", "must be a .parquet or .csv"),
                          ("../m.csv", "'..'")]:
        with pytest.raises(WindpipeError, match=pattern) as info:
            load_manifest(storage, path)
        assert info.value.type == ErrorType.INVALID_MANIFEST


def test_synthetic_dataset_registers(synth_dataset):
    storage = Storage.from_uri(synth_dataset.path.as_uri())
    version = prepare_version(storage, load_manifest(storage, "manifest.parquet"))
    assert version.total_rows == synth_dataset.n_rows
    assert version.segments.height == synth_dataset.n_segments
    assert set(version.segments.get_column("format").to_list()) == {"parquet", "zarr"}
    assert version.manifest_rows.height < synth_dataset.n_segments  # some streams are split
    assert set(version.schema) == {"cycling", "hppc", "eis"}


@pytest.mark.s3
def test_registration_over_s3_matches_local_content(s3_server, tmp_path: Path):
    data = write_synthetic_dataset(tmp_path / "d", cells=2, cycles=3, rows_per_cycle=100,
                                   zarr_fraction=0.4, split_fraction=0.4, seed=5)
    uri = s3_server.upload_dir(data.path, s3_server.unique_prefix("reg"))
    remote = s3_server.storage(uri)
    local = Storage.from_uri(data.path.as_uri())
    manifest = load_manifest(remote, "manifest.parquet")
    rv = prepare_version(remote, manifest)
    lv = prepare_version(local, manifest)
    assert rv.root_uri == uri
    assert rv.version_id != lv.version_id  # the root is part of a version
    assert rv.segments.drop("manifest_position").equals(lv.segments.drop("manifest_position"))
    assert rv.version_id == prepare_version(remote, manifest).version_id
    bad = manifest.with_columns(
        pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("segments/missing.parquet"))
        .otherwise(pl.col("segment_path")).alias("segment_path"))
    with pytest.raises(WindpipeError) as info:
        prepare_version(remote, bad)
    assert info.value.details["problems"][0]["row"] == 2
