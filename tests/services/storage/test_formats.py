"""The segment-format table: a path's format by its name, else by its marker, else parquet;
a registered segment of a format this build does not read is a segment error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.data import write_parquet_segment, write_zarr_segment
from windpipe.services.contract.errors import SegmentError
from windpipe.services.storage.formats import DEFAULT_FORMAT, FORMATS, format_named
from windpipe.services.storage.segments import (
    SegmentInfo,
    inspect_segment,
    read_chunk,
    read_rows,
    segment_format,
    verify_segment,
)
from windpipe.services.storage.store import Storage


def test_the_table_names_each_format_once() -> None:
    assert sorted(FORMATS) == ["parquet", "zarr"]
    assert all(fmt.name == name for name, fmt in FORMATS.items())
    assert DEFAULT_FORMAT.name == "parquet"


def test_a_path_has_the_format_of_its_name_else_its_marker(tmp_path: Path) -> None:
    cols = {"v": np.arange(10, dtype=np.float64)}
    write_zarr_segment(tmp_path, "group", cols, chunk_rows=4)  # a zarr group without suffix
    write_parquet_segment(tmp_path, "file", cols, row_group_rows=4)  # parquet without one
    storage = Storage.from_uri(tmp_path.as_uri())
    assert [segment_format(storage, p) for p in ("a.zarr", "a.zarr/", "a.parquet", "a.pq")] == [
        "zarr", "zarr", "parquet", "parquet"]
    assert segment_format(storage, "group") == "zarr"
    assert segment_format(storage, "file") == "parquet"
    assert inspect_segment(storage, "group").format == "zarr"
    assert inspect_segment(storage, "file").format == "parquet"


def test_an_unknown_format_is_a_segment_error(tmp_path: Path) -> None:
    storage = Storage.from_uri(tmp_path.as_uri())
    info = SegmentInfo("x.csv", "csv", 3, (), (3,), "f")  # type: ignore[arg-type]
    with pytest.raises(SegmentError, match="csv") as exc:
        format_named(info.format, path=info.path)
    assert exc.value.details == {"path": "x.csv"}
    for call in (lambda: verify_segment(storage, info), lambda: read_chunk(storage, info, 0, []),
                 lambda: read_rows(storage, info, 0, 3, [])):
        with pytest.raises(SegmentError):
            call()
