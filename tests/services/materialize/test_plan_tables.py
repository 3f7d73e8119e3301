"""plan_tables.take_strings: Arrow's ``take`` of a string array, in numpy (it keeps the
interpreter lock); the provenance tables made from the artifact's own string arrays."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from windpipe.services.materialize.plan_tables import _strings, take_strings


@pytest.mark.parametrize("values", [
    ["", "a", "ünïcödé", '["s1",3]', ""] * 300,
    [""] * 10,
    ["abc", "de"],
])
def test_take_strings_is_arrows_take(values: list[str]) -> None:
    rng = np.random.default_rng(0)
    array = pa.array(values, type=pa.string())
    for sliced in (array, array.slice(1)):
        for n in (0, 1, 777):
            idx = rng.integers(0, len(sliced), n)
            got = take_strings(sliced, idx)
            assert got.equals(sliced.take(idx))
            assert got.type == pa.string()


def test_arrays_with_nulls_or_other_types_go_to_arrow() -> None:
    idx = np.asarray([1, 0, 1])
    with_null = pa.array(["a", None, "b"], type=pa.string())
    assert take_strings(with_null, idx).equals(with_null.take(idx))
    large = pa.array(["a", "b"], type=pa.large_string())
    assert take_strings(large, idx).equals(large.take(idx))


@pytest.mark.parametrize("stored", [
    pa.array(["segments/a.parquet", "", "é/b.parquet"]),
    pa.array(["x", "segments/a.parquet", "", "b"]).slice(1),
    pa.array(["", ""]),
    pa.array([], pa.string()),
    pa.array(["a", None, "b"]),
])
def test_the_stored_strings_with_an_empty_one_after_them(stored: pa.Array) -> None:
    values = tuple(stored.to_pylist())
    out = _strings(stored, values, empty=True)
    out.validate(full=True)
    assert out.type == pa.string()
    assert out.to_pylist() == [*values, ""]
    assert _strings(stored, values, empty=False) is stored
