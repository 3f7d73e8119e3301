"""Storage roots: path validation, object I/O, parquet and zarr access, local and S3."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from tests.fixtures.data import write_parquet_segment, write_zarr_segment
from windpipe.services.storage.store import PathEscapeError, Storage


@pytest.fixture
def local_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.bin").write_bytes(b"0123456789")
    return root


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "absolute"),
        ("../outside", "'..'"),
        ("a/../../b", "'..'"),
        ("a\\b", "backslash"),
        ("", "empty"),
        ("   ", "empty"),
        ("s3://bucket/key", "URL"),
        ("file:///etc/passwd", "URL"),
        (".", "root itself"),
        ("a/\x00b", "control"),
    ],
)
def test_bad_paths_are_rejected_with_the_path_named(local_root: Path, path: str, reason: str):
    storage = Storage.from_uri(local_root.as_uri())
    with pytest.raises(PathEscapeError, match=reason) as info:
        storage.validate_relative_path(path)
    assert repr(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_symlink_escape_is_rejected_but_inner_symlink_is_fine(tmp_path: Path, local_root: Path):
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "data.parquet").write_bytes(b"x")
    os.symlink(outside, local_root / "escape")
    os.symlink(local_root / "a", local_root / "inner")
    storage = Storage.from_uri(local_root.as_uri())
    with pytest.raises(PathEscapeError, match="outside the storage root"):
        storage.validate_relative_path("escape/data.parquet")
    assert storage.validate_relative_path("inner/x.bin") == "inner/x.bin"
    assert storage.get("inner/x.bin") == b"0123456789"


def test_paths_are_normalized(local_root: Path):
    storage = Storage.from_uri(local_root.as_uri())
    assert storage.validate_relative_path("./a//x.bin") == "a/x.bin"
    assert storage.uri_for("a/x.bin") == f"{local_root.resolve().as_uri()}/a/x.bin"


def test_from_uri_rejects_bad_roots(tmp_path: Path):
    with pytest.raises(ValueError, match="not a directory"):
        Storage.from_uri((tmp_path / "missing").as_uri())
    with pytest.raises(ValueError, match="unsupported"):
        Storage.from_uri("gs://bucket/x")
    with pytest.raises(ValueError, match="absolute"):
        Storage.from_uri("relative/dir")
    assert Storage.from_uri(str(tmp_path)).uri == tmp_path.resolve().as_uri()


def test_local_object_io(local_root: Path):
    storage = Storage.from_uri(local_root.as_uri())
    assert storage.exists("a/x.bin")
    assert not storage.exists("a/missing.bin")
    assert not storage.exists("a")  # a directory is not an object
    assert storage.head("a/x.bin").size == 10
    assert storage.get_range("a/x.bin", 2, 5) == b"234"
    storage.put("new/deep/y.bin", b"hello")
    assert storage.get("new/deep/y.bin") == b"hello"
    assert storage.list_prefix("new") == [("new/deep/y.bin", 5)]
    assert storage.list_prefix("nothing-here") == []
    with pytest.raises(FileNotFoundError, match=r"missing\.bin"):
        storage.get("a/missing.bin")


def test_open_parquet_and_zarr_locally(local_root: Path):
    values = np.arange(100, dtype=np.float32)
    write_parquet_segment(local_root, "p.parquet", {"v": values}, row_group_rows=30)
    write_zarr_segment(local_root, "g.zarr", {"v": values}, chunk_rows=40)
    storage = Storage.from_uri(local_root.as_uri())
    with storage.open_parquet("p.parquet") as pf:
        assert pf.metadata.num_row_groups == 4
        np.testing.assert_array_equal(pf.read_row_group(1).column("v").to_numpy(), values[30:60])
    group = storage.open_zarr("g.zarr")
    np.testing.assert_array_equal(group["v"][:], values)
    assert isinstance(storage.zarr_store("g.zarr"), zarr.storage.LocalStore)


@pytest.mark.s3
def test_s3_roundtrip_parquet_and_zarr(s3_server, tmp_path: Path):
    values = np.linspace(0, 1, 1000).astype(np.float32)
    write_parquet_segment(tmp_path, "seg/p.parquet", {"v": values, "i": np.arange(1000)},
                          row_group_rows=256)
    write_zarr_segment(tmp_path, "seg/g.zarr", {"v": values}, chunk_rows=300)
    prefix = s3_server.unique_prefix("storage")
    uri = s3_server.upload_dir(tmp_path, prefix)
    storage = s3_server.storage(uri)
    assert storage.uri == uri
    assert not storage.is_local
    size = (tmp_path / "seg/p.parquet").stat().st_size
    assert storage.head("seg/p.parquet").size == size
    assert storage.get_range("seg/p.parquet", size - 4, size) == b"PAR1"
    listed = dict(storage.list_prefix("seg/g.zarr"))
    assert "seg/g.zarr/zarr.json" in listed
    assert "seg/g.zarr/v/zarr.json" in listed
    with storage.open_parquet("seg/p.parquet") as pf:
        assert pf.metadata.num_rows == 1000
        table = pf.read_row_group(2, columns=["v"])
        np.testing.assert_array_equal(table.column("v").to_numpy(), values[512:768])
    np.testing.assert_array_equal(storage.open_zarr("seg/g.zarr")["v"][:], values)
    storage.put("seg/written.bin", b"abc")
    assert storage.get("seg/written.bin") == b"abc"
    assert not storage.exists("seg/none.bin")
    with pytest.raises(PathEscapeError):
        storage.get("../other")


@pytest.mark.s3
def test_s3_concurrent_readers(s3_server, tmp_path: Path):
    table = pa.table({"v": np.arange(4000, dtype=np.float64)})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=500)
    uri = s3_server.upload_dir(tmp_path, s3_server.unique_prefix("conc"))
    storage = s3_server.storage(uri)

    def read(i: int) -> float:
        with storage.open_parquet("c.parquet") as pf:
            return float(pf.read_row_group(i % 8).column("v").to_numpy().sum())

    with ThreadPoolExecutor(max_workers=6) as pool:
        sums = list(pool.map(read, range(24)))
    expected = [float(np.arange(4000)[(i % 8) * 500:(i % 8 + 1) * 500].sum()) for i in range(24)]
    assert sums == expected
