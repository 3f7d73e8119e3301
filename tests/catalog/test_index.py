"""The ML index (SEMANTICS section 1): order, per-row segments, Arrow IPC round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from tests.fixtures.data import write_parquet_segment
from windpipe.catalog.index import build_index, index_to_arrow_ipc
from windpipe.catalog.manifest import load_manifest, manifest_from_rows
from windpipe.catalog.registration import prepare_version
from windpipe.sdk import InvalidRequest, MlDatasetIndex
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.identity import manifest_row_id
from windpipe.services.storage.store import Storage


@pytest.fixture
def version(tmp_path: Path):
    for name, n in [("s1", 10), ("s2", 7), ("s3", 5), ("s4", 3), ("s5", 4)]:
        write_parquet_segment(tmp_path, f"{name}.parquet", {"x": np.arange(n, dtype=np.float32)})
    rows = [
        {"set_id": "b", "cell_id": "c2", "cidx": 10, "protocol": "cycling",
         "segment_path": "s1.parquet", "temp": 25},
        {"set_id": "a", "cell_id": "c9", "cidx": 2, "protocol": "hppc",
         "segment_path": "s2.parquet", "temp": 35},
        {"set_id": "b", "cell_id": "c2", "cidx": 9, "protocol": "cycling",
         "segment_path": "s3.parquet", "temp": 25},
        {"set_id": "a", "cell_id": "c9", "cidx": 2, "protocol": "cycling",
         "segment_path": "s4.parquet", "temp": 35},
        # a second, non-adjacent segment of the identity of row 1
        {"set_id": "a", "cell_id": "c9", "cidx": 2, "protocol": "hppc",
         "segment_path": "s5.parquet", "temp": 35},
    ]
    return prepare_version(Storage.from_uri(tmp_path.as_uri()), manifest_from_rows(rows))


def test_index_columns_order_and_segments(version):
    index = build_index(version.manifest_rows, version.segments)
    assert index.columns == [
        "manifest_row_id", "set_id", "cell_id", "cidx", "protocol", "temp", "row_count",
        "n_segments", "segment_paths", "segment_rows", "position",
    ]
    assert index.schema["manifest_row_id"] == pl.Int64
    assert index.schema["cidx"] == pl.Int64
    assert index.select("set_id", "cell_id", "cidx", "protocol").rows() == [
        ("a", "c9", 2, "cycling"), ("a", "c9", 2, "hppc"),
        ("b", "c2", 9, "cycling"), ("b", "c2", 10, "cycling"),
    ]
    hppc = index.row(1, named=True)
    assert hppc["segment_paths"] == ["s2.parquet", "s5.parquet"]
    assert hppc["segment_rows"] == [7, 4]
    assert hppc["row_count"] == 11
    assert hppc["n_segments"] == 2
    assert hppc["position"] == 1
    assert hppc["manifest_row_id"] == manifest_row_id("a", "c9", 2, "hppc")
    assert index.get_column("position").to_list() == [3, 1, 2, 0]


def test_cidx_sorts_numerically_not_lexically(version):
    index = build_index(version.manifest_rows, version.segments)
    b = index.filter(pl.col("set_id") == "b").get_column("cidx").to_list()
    assert b == [9, 10]


def test_arrow_ipc_round_trip(version):
    index = build_index(version.manifest_rows, version.segments)
    data = index_to_arrow_ipc(index)
    assert data[:4] == b"\xff\xff\xff\xff"  # an IPC stream starts with a continuation marker
    assert pl.from_arrow(pa.ipc.open_stream(data).read_all()).equals(index)


def test_filter_split(version):
    index = build_index(version.manifest_rows, version.segments)
    with pytest.raises(InvalidRequest, match="no 'split' column") as info:
        MlDatasetIndex(index).filter_split("train")
    assert info.value.type == ErrorType.INVALID_REQUEST
    with_split = MlDatasetIndex(index.with_columns(
        pl.Series("split", ["train", "val", "train", "train"])))
    assert len(with_split.filter_split("val")) == 1
    assert with_split.filter_split("train").frame.get_column("cidx").to_list() == [2, 9, 10]


def test_synthetic_index_is_sorted_and_complete(synth_dataset):
    storage = Storage.from_uri(synth_dataset.path.as_uri())
    version = prepare_version(storage, load_manifest(storage, "manifest.parquet"))
    index = build_index(version.manifest_rows, version.segments)
    keys = index.select("set_id", "cell_id", "cidx", "protocol").rows()
    assert keys == sorted(keys)
    assert len(set(keys)) == index.height
    assert int(index.get_column("n_segments").sum()) == synth_dataset.n_segments
    assert int(index.get_column("row_count").sum()) == synth_dataset.n_rows
    assert index.get_column("chemistry").null_count() == 0
