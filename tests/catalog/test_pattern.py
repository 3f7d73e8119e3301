"""Registering a folder by a path pattern, no manifest file (windpipe/catalog/pattern.py): the
pattern's rules, the manifest it builds, the precise refusals, and the same over a real
catalog server on a local folder and on S3 (moto)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.pattern import PatternSource, manifest_from_pattern, parse_pattern
from windpipe.sdk import Catalog, InvalidManifest, InvalidRequest
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.limits import Limits
from windpipe.services.settings import Settings
from windpipe.services.storage.store import Storage

PATTERN = "{cell_id}/{protocol}/cycle_{cidx}.parquet"


def _segment(path: Path, rows: int = 30, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({
        "time_s": np.arange(rows, dtype=np.float64),
        "current_a": rng.normal(0, 1, rows).astype(np.float32),
        "voltage_v": (3.7 + rng.normal(0, 0.01, rows)).astype(np.float32),
    }).write_parquet(path)
    return path


def _folder(root: Path, cells: tuple[str, ...] = ("c1", "c2"),
            cycles: tuple[int, ...] = (0, 1, 10)) -> Path:
    for i, cell in enumerate(cells):
        for cidx in cycles:
            _segment(root / cell / "cycling" / f"cycle_{cidx}.parquet", seed=i * 100 + cidx)
    return root


def _build(root: Path, pattern: str = PATTERN, **kw: Any) -> pl.DataFrame:
    limits = kw.pop("limits", None)
    return manifest_from_pattern(Storage.from_uri(str(root)), PatternSource(pattern, **kw),
                                 dataset="lab", limits=limits)


def _first_problem(exc: pytest.ExceptionInfo[WindpipeError]) -> dict[str, Any]:
    return exc.value.details["problems"][0]


@pytest.mark.parametrize(("pattern", "says"), [
    ("{protocol}/cycle_{cidx}.parquet", "needs the field {cell_id}"),
    ("{cell_id}/data.parquet", "needs the field {cidx}"),
    ("{cell_id}/cycle_{cidx:str}.parquet", "cidx is an integer"),
    ("{cell_id:int}/cycle_{cidx}.parquet", "cell_id is a string"),
    ("{cell_id}/cycle_{cidx}{part}.parquet", "need literal text between them"),
    ("{cell_id}/cycle_{cidx.parquet", "unbalanced brace"),
    ("{cell_id}/cycle_{cidx}.csv", "must end in the segments' suffix"),
    ("{cell_id}/../cycle_{cidx}.parquet", "'..'"),
    ("/{cell_id}/cycle_{cidx}.parquet", "relative to the root"),
    ("{cell_id}/cycle_{cidx}_{cidx}.parquet", "appears twice"),
    ("{cell_id}/cycle_{cidx}_{x:date}.parquet", "has type 'date'"),
    ("{cell_id}/{path}/cycle_{cidx}.parquet", "reserved"),
    ("{cell_id}/{9x}/cycle_{cidx}.parquet", "is not a field"),
])
def test_a_bad_pattern_is_refused_saying_why(pattern: str, says: str) -> None:
    with pytest.raises(WindpipeError) as exc:
        parse_pattern(pattern)
    assert exc.value.type.value == "invalid_request"
    assert says in exc.value.message, exc.value.message


def test_leading_literal_folders_are_where_the_walk_starts() -> None:
    parsed = parse_pattern("data/raw/{cell_id}/cycle_{cidx}.parquet")
    assert parsed.start == "data/raw"
    assert [c.text for c in parsed.components] == ["{cell_id}", "cycle_{cidx}.parquet"]
    assert parsed.types == {"cell_id": "str", "cidx": "int"}


def test_the_manifest_is_built_from_the_paths(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    (root / "notes.txt").write_text("not a segment: ignored")
    (root / ".ipynb_checkpoints").mkdir()
    _segment(root / ".ipynb_checkpoints" / "x.parquet")  # hidden: skipped
    frame = _build(root)
    assert frame.columns == ["set_id", "cell_id", "cidx", "protocol", "segment_path"]
    assert frame.schema["cidx"] == pl.Int64
    assert frame.get_column("set_id").unique().to_list() == ["lab"]  # the dataset's name
    # identity order: cycles numerically (10 after 1), not as text
    assert frame.filter(pl.col("cell_id") == "c1").get_column("cidx").to_list() == [0, 1, 10]
    assert frame.get_column("segment_path")[2] == "c1/cycling/cycle_10.parquet"


def test_fixed_set_and_protocol_metadata_fields_and_ordering_fields(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for cell, temp in (("a", 25), ("b", 45)):
        for part in (2, 10, 1):
            _segment(root / f"T{temp}" / cell / f"cyc_3_part{part}.parquet", rows=5 + part)
    frame = _build(root, "T{temp_c:float}/{cell_id}/cyc_{cidx}_part{_part:int}.parquet",
                   set_id="batch-7", protocol="hppc")
    assert frame.columns == ["set_id", "cell_id", "cidx", "protocol", "segment_path", "temp_c"]
    assert set(frame.get_column("protocol")) == {"hppc"}
    assert set(frame.get_column("set_id")) == {"batch-7"}
    a = frame.filter(pl.col("cell_id") == "a")
    # the parts of one identity in numeric part order: one stream, three segments
    assert a.get_column("segment_path").to_list() == [
        f"T25/a/cyc_3_part{p}.parquet" for p in (1, 2, 10)]
    assert a.get_column("temp_c").to_list() == [25.0, 25.0, 25.0]


def test_files_that_do_not_fit_are_named(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    _segment(root / "c2" / "cycling" / "cyc_3.parquet")
    _segment(root / "c1" / "cycling" / "cycle_x4.parquet")
    _segment(root / "c1" / "Cycling" / "cycle_5.parquet")
    _segment(root / "cycle_9.parquet")  # a segment in the wrong folder
    _segment(root / "summary.parquet")  # no segment: ignored
    with pytest.raises(WindpipeError) as exc:
        _build(root)
    assert exc.value.type.value == "invalid_manifest"
    problems = {p["segment_path"]: p["problem"] for p in exc.value.details["problems"]}
    assert exc.value.details["problem_count"] == 4
    assert problems["c2/cycling/cyc_3.parquet"] == (
        "name 'cyc_3.parquet' does not match 'cycle_{cidx}.parquet'")
    assert problems["c1/cycling/cycle_x4.parquet"] == "field 'cidx' is 'x4', not an integer"
    assert "lower-case" in problems["c1/Cycling/cycle_5.parquet"]
    assert problems["cycle_9.parquet"] == (
        "is a parquet file at depth 1; the pattern names parquet files at depth 3")
    assert "'c1/Cycling/cycle_5.parquet'" in exc.value.message


def test_two_files_of_one_identity_are_refused_without_an_ordering_field(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data", cells=("c1",), cycles=(1,))
    _segment(root / "c1" / "cycling" / "cycle_01.parquet")
    with pytest.raises(WindpipeError) as exc:
        _build(root)
    first = _first_problem(exc)
    assert first["segment_path"] == "c1/cycling/cycle_1.parquet"
    assert "'c1/cycling/cycle_01.parquet'" in first["problem"]
    assert "{_part:int}" in first["problem"]


def test_zarr_groups_are_matched_and_never_descended(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    root = tmp_path / "data"
    for cidx in (0, 1):
        group = zarr.open_group(str(root / "c1" / f"cycle_{cidx}.zarr"), mode="w",
                                zarr_format=3)
        group.create_array("time_s", shape=(20,), dtype="float64")[:] = np.arange(20.0)
    frame = _build(root, "{cell_id}/cycle_{cidx}.zarr")
    assert frame.get_column("segment_path").to_list() == ["c1/cycle_0.zarr", "c1/cycle_1.zarr"]
    with pytest.raises(WindpipeError) as exc:  # a parquet pattern meets zarr groups
        _build(root, "{cell_id}/cycle_{cidx}.parquet")
    assert "is a zarr group; the pattern names parquet files" in _first_problem(exc)["problem"]


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data", cells=("c1",))
    outside = _folder(tmp_path / "elsewhere", cells=("secret",))
    os.symlink(outside / "secret", root / "c9")
    with pytest.raises(WindpipeError) as exc:
        _build(root)
    assert "resolves outside the storage root" in exc.value.message


def test_the_listing_and_the_matches_are_bounded(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data", cells=("c1", "c2", "c3"))
    with pytest.raises(WindpipeError) as exc:
        _build(root, limits=Limits(max_manifest_rows=4))
    assert exc.value.details["limit"] == "max_manifest_rows"
    assert "WINDPIPE_MAX_MANIFEST_ROWS" in exc.value.message


def test_nothing_matched_says_what_is_there(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "readme.md").write_text("x")
    with pytest.raises(WindpipeError) as exc:
        _build(root)
    assert "matched no segment" in exc.value.message
    assert "readme.md" in exc.value.message


def test_a_side_table_adds_metadata_by_cell(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    pl.DataFrame({"cell_id": ["c1", "c2", "c3"], "chemistry": ["nmc", "lfp", "nca"],
                  "capacity_ah": [3.0, 2.5, 3.4]}).write_csv(root / "cells.csv")
    frame = _build(root, metadata="cells.csv")
    assert frame.select("cell_id", "chemistry").unique().sort("cell_id").rows() == [
        ("c1", "nmc"), ("c2", "lfp")]
    rows = [{"cell_id": "c1", "lab": "x"}, {"cell_id": "c2", "lab": "y"}]
    assert set(_build(root, metadata_rows=rows).get_column("lab")) == {"x", "y"}


@pytest.mark.parametrize(("rows", "says"), [
    ([{"cell_id": "c1", "lab": "x"}], "cell ('c2',) has no row in the metadata table"),
    ([{"cell_id": "c1", "lab": "x"}, {"cell_id": "c2", "lab": "y"},
      {"cell_id": "c2", "lab": "z"}], "a second row for ('c2',)"),
    ([{"cell": "c1"}], "needs a cell_id column"),
    ([{"cell_id": "c1", "cidx": 3}], "column 'cidx' is an identity column"),
])
def test_a_side_table_that_does_not_fit_is_refused(tmp_path: Path, rows: list[dict[str, Any]],
                                                   says: str) -> None:
    root = _folder(tmp_path / "data")
    with pytest.raises(WindpipeError) as exc:
        _build(root, metadata_rows=rows)
    assert says in exc.value.message, exc.value.message


def _settings(tmp_path: Path, **extra: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'catalog.db'}",
                    data_dir=tmp_path / "state", log_level="WARNING", **extra)


def test_register_by_pattern_over_a_catalog_server(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    pl.DataFrame({"cell_id": ["c1", "c2"], "chemistry": ["nmc", "lfp"]}).write_parquet(
        root / "cells.parquet")
    with run_catalog_server(_settings(tmp_path)) as url, Catalog(url) as cat:
        ver = cat.register("lab", root=root.as_uri(), pattern=PATTERN, metadata="cells.parquet",
                           progress=False)
        assert (ver.raw["n_manifest_rows"], ver.raw["n_segments"]) == (6, 6)
        index = ver.index().frame
        assert index.get_column("set_id").unique().to_list() == ["lab"]
        assert dict(index.select("cell_id", "chemistry").unique().iter_rows()) == {
            "c1": "nmc", "c2": "lfp"}
        # the same files and pattern again: the same version
        again = cat.register("lab", root=root.as_uri(), pattern=PATTERN,
                             metadata="cells.parquet", progress=False)
        assert again.id == ver.id
        # a frame as the side table, a fixed set_id: another version
        other = cat.register("lab", root=root.as_uri(), pattern=PATTERN, set_id="s1",
                             metadata=pl.DataFrame({"cell_id": ["c1", "c2"], "k": [1, 2]}),
                             progress=False)
        assert other.id != ver.id
        assert set(other.index().frame.get_column("set_id")) == {"s1"}
        _segment(root / "c2" / "cycling" / "cycle_7b.parquet")
        with pytest.raises(InvalidManifest) as exc:
            cat.register("lab", root=root.as_uri(), pattern=PATTERN, progress=False)
        assert exc.value.details["problems"][0]["segment_path"] == "c2/cycling/cycle_7b.parquet"
        assert "'7b', not an integer" in str(exc.value)
        with pytest.raises(InvalidRequest):  # the pattern's options need a pattern
            cat.register("lab", root=root.as_uri(), manifest="m.parquet", set_id="x")
        with pytest.raises(InvalidRequest):
            cat.register("lab", root=root.as_uri(), pattern="{cell_id}.parquet",
                         progress=False)


@pytest.mark.s3
def test_register_by_pattern_on_s3(tmp_path: Path, s3_server: Any) -> None:
    root = _folder(tmp_path / "data")
    uri = s3_server.upload_dir(root, s3_server.unique_prefix("pattern"))
    settings = _settings(tmp_path, s3_endpoint=s3_server.endpoint_url, s3_allow_http=True)
    with run_catalog_server(settings) as url, Catalog(url) as cat:
        remote = cat.register("lab-s3", root=uri, pattern=PATTERN, progress=False)
        local = cat.register("lab-local", root=root.as_uri(), pattern=PATTERN, progress=False)
        keys = ["cell_id", "cidx", "protocol", "row_count"]
        assert remote.index().frame.select(keys).equals(local.index().frame.select(keys))
    assert remote.root == uri
    assert [remote.raw[k] for k in ("n_manifest_rows", "n_rows")] == [
        local.raw[k] for k in ("n_manifest_rows", "n_rows")]
