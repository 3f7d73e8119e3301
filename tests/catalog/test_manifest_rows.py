"""Inline manifest rows become one table a slice at a time (the event loop gets the
interpreter lock back between slices) with the table one polars call over every row
makes: the same columns, in the same order, of the same types, with the same values."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from windpipe.catalog.manifest import _ROWS_PER_SLICE, _frame_of_rows

N = 4 * _ROWS_PER_SLICE + 17


def _rows() -> list[dict[str, Any]]:
    return [{"set_id": "s", "cell_id": f"c{i % 7}", "cidx": i, "protocol": "cycling",
             "segment_path": f"c{i % 7}/{i}.parquet"} for i in range(N)]


def _late_float(rows: list[dict[str, Any]]) -> None:
    rows[-1]["cidx"] = 1.5  # an int column turned float by its very last row


def _late_key(rows: list[dict[str, Any]]) -> None:
    rows[3 * _ROWS_PER_SLICE + 2]["temperature_c"] = 25.0  # only in a later slice


def _nulls_across_a_slice(rows: list[dict[str, Any]]) -> None:
    for row in rows[_ROWS_PER_SLICE - 3:2 * _ROWS_PER_SLICE + 3]:
        row["cidx"] = None  # a whole slice of nulls


def _mixed_text(rows: list[dict[str, Any]]) -> None:
    rows[0]["cell_id"] = 7  # a number where the later rows hold text


@pytest.mark.parametrize("change", [_late_float, _late_key, _nulls_across_a_slice,
                                    _mixed_text, lambda rows: None])
def test_slices_make_the_table_one_call_makes(change: Any) -> None:
    rows = _rows()
    change(rows)
    whole = pl.DataFrame(rows, infer_schema_length=None)
    sliced = _frame_of_rows(rows)
    assert sliced.columns == whole.columns
    assert sliced.schema == whole.schema
    assert sliced.equals(whole)
    assert sliced.n_chunks() == 1
