"""Segment inspection and chunk reads: parquet and zarr v3, local and S3."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
import zarr.codecs
import zarr.storage

from tests.fixtures.data import write_parquet_segment, write_zarr_segment
from windpipe.services.contract.errors import ErrorType, SegmentChanged, SegmentError, WindpipeError
from windpipe.services.storage.segments import (
    inspect_segment,
    read_chunk,
    read_chunks,
    read_rows,
    verify_segment,
)
from windpipe.services.storage.store import Storage
from windpipe.services.storage.zarr_chunks import column_plan

N = 1000


def _columns() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "t": np.arange(N, dtype=np.float64) * 0.5,
        "v": rng.normal(3.7, 0.1, N).astype(np.float32),
        "n": np.arange(N, dtype=np.int32),
        "flag": (np.arange(N) % 3 == 0),
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    cols = _columns()
    v_null = cols["v"].copy()
    v_null[[5, 700]] = np.nan
    mask = np.zeros(N, dtype=bool)
    mask[[5, 700]] = True
    write_parquet_segment(
        tmp_path, "p.parquet",
        {**cols, "v": pa.array(cols["v"], mask=mask)}, row_group_rows=300,
    )
    write_zarr_segment(tmp_path, "z.zarr", {**cols, "v": v_null}, chunk_rows=300)
    return tmp_path


def test_inspect_parquet(root: Path):
    info = inspect_segment(Storage.from_uri(root.as_uri()), "p.parquet")
    assert info.format == "parquet"
    assert info.row_count == N
    assert info.chunk_rows == (300, 300, 300, 100)
    assert [(c.name, c.dtype, c.numeric) for c in info.columns] == [
        ("t", "double", True), ("v", "float", True), ("n", "int32", True), ("flag", "bool", True)
    ]
    assert info.chunk_starts.tolist() == [0, 300, 600, 900, 1000]
    assert len(info.fingerprint) == 32


def test_inspect_zarr_keeps_column_order_attribute(root: Path):
    info = inspect_segment(Storage.from_uri(root.as_uri()), "z.zarr")
    assert info.format == "zarr"
    assert info.row_count == N
    assert info.chunk_rows == (300, 300, 300, 100)
    assert [c.name for c in info.columns] == ["t", "v", "n", "flag"]
    assert [c.dtype for c in info.columns] == ["double", "float", "int32", "bool"]


def test_parquet_and_zarr_read_the_same_values(root: Path):
    storage = Storage.from_uri(root.as_uri())
    pq_info = inspect_segment(storage, "p.parquet")
    z_info = inspect_segment(storage, "z.zarr")
    names = ["t", "v", "n", "flag"]
    for idx in range(4):
        a = read_chunk(storage, pq_info, idx, names)
        b = read_chunk(storage, z_info, idx, names)
        for name in names:
            assert a[name].dtype == np.float64
            np.testing.assert_array_equal(a[name], b[name])
    first = read_chunk(storage, pq_info, 0, ["v", "n", "flag"])
    assert np.isnan(first["v"][5])
    assert np.isnan(read_chunk(storage, pq_info, 2, ["v"])["v"][100])
    assert first["n"][:3].tolist() == [0.0, 1.0, 2.0]
    assert first["flag"][:4].tolist() == [1.0, 0.0, 0.0, 1.0]
    rows_a = read_rows(storage, pq_info, 250, 950, ["t", "v"])
    rows_b = read_rows(storage, z_info, 250, 950, ["t", "v"])
    np.testing.assert_array_equal(rows_a["t"], np.arange(250, 950) * 0.5)
    np.testing.assert_array_equal(rows_a["v"], rows_b["v"])
    assert read_rows(storage, pq_info, 990, 5000, ["t"])["t"].shape == (10,)


def test_read_chunk_errors(root: Path):
    storage = Storage.from_uri(root.as_uri())
    info = inspect_segment(storage, "p.parquet")
    with pytest.raises(SegmentError, match="no chunk 4"):
        read_chunk(storage, info, 4, ["t"])
    with pytest.raises(SegmentError, match="no column 'nope'"):
        read_chunk(storage, info, 0, ["nope"])


def test_fingerprint_is_content_based(root: Path, tmp_path_factory: pytest.TempPathFactory):
    other = tmp_path_factory.mktemp("copy")
    shutil.copytree(root, other, dirs_exist_ok=True)
    a, b = Storage.from_uri(root.as_uri()), Storage.from_uri(other.as_uri())
    for path in ("p.parquet", "z.zarr"):
        assert inspect_segment(a, path).fingerprint == inspect_segment(b, path).fingerprint
    cols = _columns()
    cols["v"][0] += 1.0
    write_parquet_segment(other, "p.parquet", cols, row_group_rows=300)
    write_zarr_segment(other, "z.zarr", cols, chunk_rows=300)
    for path in ("p.parquet", "z.zarr"):
        assert inspect_segment(a, path).fingerprint != inspect_segment(b, path).fingerprint


def test_missing_corrupt_and_malformed_segments(root: Path):
    storage = Storage.from_uri(root.as_uri())
    (root / "junk.parquet").write_bytes(b"this is not parquet at all")
    data = (root / "p.parquet").read_bytes()
    (root / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (root / "badfooter.parquet").write_bytes(data[:100] + b"\xff" * 200 + data[-8:])
    write_zarr_segment(root, "uneven.zarr", {"a": np.zeros(10), "b": np.zeros(11)})
    write_zarr_segment(root, "twod.zarr", {"a": np.zeros((10, 2))})
    cases = {
        "missing.parquet": "does not exist",
        "missing.zarr": "does not exist",
        "junk.parquet": "not a parquet file",
        "truncated.parquet": "not a parquet file",
        "badfooter.parquet": "corrupt parquet footer|cannot be read",
        "uneven.zarr": "different lengths",
        "twod.zarr": "must be 1-D",
        "../escape.parquet": "'..'",
    }
    for path, pattern in cases.items():
        with pytest.raises(SegmentError, match=pattern) as info:
            inspect_segment(storage, path)
        assert isinstance(info.value, WindpipeError)
        assert info.value.type == ErrorType.SEGMENT_ERROR
        if path != "../escape.parquet":
            assert path in info.value.message


@pytest.mark.s3
def test_segments_over_s3_match_local(s3_server, root: Path):
    local = Storage.from_uri(root.as_uri())
    remote = s3_server.storage(s3_server.upload_dir(root, s3_server.unique_prefix("seg")))
    for path in ("p.parquet", "z.zarr"):
        li, ri = inspect_segment(local, path), inspect_segment(remote, path)
        assert (li.row_count, li.columns) == (ri.row_count, ri.columns)
        assert li.chunk_rows == ri.chunk_rows
        assert li.fingerprint == ri.fingerprint
        for idx in range(len(li.chunk_rows)):
            a = read_chunk(local, li, idx, ["t", "v"])
            b = read_chunk(remote, ri, idx, ["t", "v"])
            np.testing.assert_array_equal(a["v"], b["v"])
            np.testing.assert_array_equal(a["t"], b["t"])
    with pytest.raises(SegmentError, match="does not exist"):
        inspect_segment(remote, "gone.parquet")


@pytest.mark.parametrize(
    ("options", "direct"),
    [
        ({}, True),
        ({"compressors": zarr.codecs.GzipCodec()}, True),
        ({"compressors": zarr.codecs.BloscCodec(cname="lz4")}, True),
        ({"compressors": None}, True),
        ({"chunk_key_encoding": {"name": "v2", "separator": "."}}, True),
        ({"shards": (300,)}, False),
        ({"filters": zarr.codecs.TransposeCodec(order=(0,))}, False),
    ],
)
def test_direct_zarr_chunk_reads_match_zarr(tmp_path: Path, options: dict, direct: bool):
    values = np.random.default_rng(1).normal(size=700).astype(np.float32)
    values[[3, 450]] = np.nan
    group = zarr.open_group(zarr.storage.LocalStore(tmp_path / "g.zarr"), mode="w",
                            zarr_format=3)
    chunks = (100,) if "shards" in options else (300,)
    arr = group.create_array("v", shape=(700,), chunks=chunks, dtype="float32",
                             fill_value=np.nan, **options)
    arr[:] = values
    ints = group.create_array("i", shape=(700,), chunks=chunks, dtype="int16", **options)
    ints[:] = np.arange(700, dtype=np.int16)
    storage = Storage.from_uri(tmp_path.as_uri())
    info = inspect_segment(storage, "g.zarr")
    assert info.chunk_rows == (300, 300, 100)
    plan = column_plan("g.zarr/v", (tmp_path / "g.zarr/v/zarr.json").read_bytes())
    assert (plan is not None) == direct
    for idx, (lo, hi) in enumerate([(0, 300), (300, 600), (600, 700)]):
        got = read_chunk(storage, info, idx, ["v", "i"])
        np.testing.assert_array_equal(got["v"], values[lo:hi].astype(np.float64))
        np.testing.assert_array_equal(got["i"], np.arange(lo, hi, dtype=np.float64))


def test_missing_zarr_chunk_file_reads_as_fill_value(tmp_path: Path):
    group = zarr.open_group(zarr.storage.LocalStore(tmp_path / "g.zarr"), mode="w",
                            zarr_format=3)
    arr = group.create_array("v", shape=(20,), chunks=(10,), dtype="float64", fill_value=np.nan)
    arr[:10] = np.arange(10.0)  # the second chunk is never written
    storage = Storage.from_uri(tmp_path.as_uri())
    info = inspect_segment(storage, "g.zarr")
    assert np.isnan(read_chunk(storage, info, 1, ["v"])["v"]).all()
    assert read_chunk(storage, info, 0, ["v"])["v"].tolist() == list(np.arange(10.0))


def _verified_segment(tmp_path: Path, fmt: str) -> tuple[Storage, Any, Path]:
    values = {"a": np.arange(40.0), "b": np.arange(40.0) * 2}
    if fmt == "parquet":
        path = write_parquet_segment(tmp_path, "s.parquet", values, row_group_rows=10)
    else:
        path = write_zarr_segment(tmp_path, "s.zarr", values, chunk_rows=10)
    storage = Storage.from_uri(tmp_path.as_uri())
    info = inspect_segment(storage, path.name)
    assert read_chunk(storage, info, 3, ["a"])["a"].tolist() == list(np.arange(30.0, 40.0))
    return storage, info, path


@pytest.mark.parametrize("fmt", ["parquet", "zarr"])
def test_a_segment_rewritten_in_place_is_refused(tmp_path: Path, fmt: str):
    storage, info, path = _verified_segment(tmp_path, fmt)
    other = {"a": np.arange(40.0) + 0.5, "b": np.arange(40.0)}
    if fmt == "parquet":  # same rows, same row groups, other values: only the bytes differ
        write_parquet_segment(tmp_path, "s.parquet", other, row_group_rows=10)
    else:  # one chunk file rewritten with other (differently compressible) values
        chunk = path / "a" / "c" / "3"
        assert chunk.is_file()
        chunk.write_bytes(chunk.read_bytes()[:-7])
    with pytest.raises(SegmentChanged) as exc:
        read_chunk(storage, info, 3, ["a"])
    assert exc.value.type == ErrorType.SEGMENT_CHANGED
    assert exc.value.details["path"] == info.path
    assert exc.value.details["fingerprint"] == info.fingerprint
    assert info.path in exc.value.message


def test_a_truncated_parquet_segment_is_a_typed_error_not_a_signal(tmp_path: Path):
    storage, info, path = _verified_segment(tmp_path, "parquet")
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    with pytest.raises(SegmentChanged) as exc:
        read_chunk(storage, info, 0, ["a", "b"])
    assert "bytes" in exc.value.details["why"]


def test_an_unchanged_segment_is_verified_with_one_head(tmp_path: Path, monkeypatch):
    storage, info, _ = _verified_segment(tmp_path, "parquet")
    ranges: list[tuple[int, int]] = []
    real = Storage.get_range

    def counting(self: Storage, path: str, start: int, end: int) -> bytes:
        ranges.append((start, end))
        return real(self, path, start, end)

    monkeypatch.setattr(Storage, "get_range", counting)
    for _ in range(5):
        assert verify_segment(storage, info) is None
    assert ranges == []  # the footer is not re-read while size and e-tag match


def test_read_chunks_of_a_small_file_are_parquet_files_row_groups(root: Path) -> None:
    """A small local file's chunks come from pyarrow's reader directly (not through
    ``ParquetFile``): the same table ``ParquetFile.read_row_groups`` reads, columns in
    the order asked, any row groups in any order; a column the file lacks is left out,
    as ``ParquetFile`` leaves it out (the caller finds it missing)."""
    storage = Storage.from_uri(root.as_uri())
    info = inspect_segment(storage, "p.parquet")
    names = ["flag", "v", "n", "t"]
    table = read_chunks(storage, info, [3, 0, 1], names)
    with pq.ParquetFile(root / "p.parquet") as pf:
        expected = pf.read_row_groups([3, 0, 1], columns=names, use_threads=False)
    assert table.equals(expected)
    assert table.schema.equals(expected.schema)
    lacking = dataclasses.replace(
        info, columns=(*info.columns, dataclasses.replace(info.columns[0], name="gone")))
    with pq.ParquetFile(root / "p.parquet") as pf:
        expected = pf.read_row_groups([0], columns=["t", "gone"], use_threads=False)
    assert read_chunks(storage, lacking, [0], ["t", "gone"]).equals(expected)
    assert expected.column_names == ["t"]


def test_read_chunks_of_a_small_file_build_no_parquet_file(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The small-file read opens pyarrow's reader over the bytes itself: no Python
    ``ParquetFile`` (its column path map costs a fifth of a 60-row file's read)."""
    storage = Storage.from_uri(root.as_uri())
    info = inspect_segment(storage, "p.parquet")

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("ParquetFile built for a small file's read")

    monkeypatch.setattr(pq, "ParquetFile", refused)
    assert read_chunks(storage, info, [1], ["v"]).num_rows == info.chunk_rows[1]
