"""Registration profiles the values: null and non-finite counts per protocol and
column, irregular sampling of ``time_s`` per segment, and says so in warnings that the
SDK raises (``windpipe.sdk.DataWarning``), never silently."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import windpipe.sdk as sdk
from tests.fixtures.data import write_manifest, write_parquet_segment, write_zarr_segment
from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.profile import sampling_problem
from windpipe.services.contract.stats import GAP_FACTOR
from windpipe.services.settings import Settings


def test_sampling_rules() -> None:
    steady = np.arange(100, dtype=np.float64)
    assert sampling_problem(steady) == (0, 0, 1.0, 1.0)
    holed = np.concatenate([np.arange(50.0), np.arange(50.0) + 50 + 30])  # one 31 s step
    gaps, back, median, largest = sampling_problem(holed)
    assert (gaps, back, median, largest) == (1, 0, 1.0, 31.0)
    # a protocol that samples its phases at different rates is not irregular
    phases = np.cumsum(np.repeat([1.0, 20.0, 0.5, 300.0], 40))
    assert sampling_problem(phases)[:2] == (0, 0)
    stepped_back = steady.copy()
    stepped_back[60] = 10.0
    assert sampling_problem(stepped_back)[1] == 1
    repeated = np.array([0.0, 1.0, 1.0, 2.0])
    assert sampling_problem(repeated)[1] == 1
    with_nan = steady.copy()
    with_nan[[3, 4]] = np.nan  # unknown times are nulls, not steps
    assert sampling_problem(with_nan)[:2] == (0, 0)
    assert sampling_problem(np.array([1.0])) == (0, 0, None, None)
    edge = np.array([0.0, 1.0 + GAP_FACTOR * 2, 2.0 + GAP_FACTOR * 2, 3.0 + GAP_FACTOR * 2])
    assert sampling_problem(edge)[0] == 1  # the first step has one neighbour


def _write(root: Path) -> dict[str, dict[str, np.ndarray]]:
    n = 120
    t = np.arange(n, dtype=np.float64)
    gap = t.copy()
    gap[70:] += 500.0  # a hole in the recording
    back = t.copy()
    back[30] = 5.0  # time steps back
    volts = np.linspace(3.0, 4.2, n)
    volts[[3, 9]] = np.nan
    volts[4] = np.inf
    current = np.ones(n, dtype=np.float32)
    current[7] = -np.inf
    seg_a = {"time_s": t, "voltage_v": volts, "current_a": current,
             "cycle": np.arange(n, dtype=np.int32)}
    write_parquet_segment(root, "a.parquet", {
        **seg_a, "cycle": pa.array(np.arange(n, dtype=np.int32),
                                   mask=np.arange(n) % 40 == 0)}, row_group_rows=50)
    seg_b = {"time_s": gap, "voltage_v": np.full(n, 3.5), "current_a": current.copy()}
    write_zarr_segment(root, "b.zarr", seg_b, chunk_rows=32)
    seg_c = {"time_s": back, "voltage_v": np.full(n, 3.6)}  # no current sensor
    write_parquet_segment(root, "c.parquet", seg_c)
    write_manifest(root, [
        {"set_id": "s", "cell_id": f"c{i}", "cidx": 0, "protocol": "cycling",
         "segment_path": p} for i, p in enumerate(("a.parquet", "b.zarr", "c.parquet"))])
    return {"a.parquet": seg_a, "b.zarr": seg_b, "c.parquet": seg_c}


def test_the_registration_answer_carries_the_profile_and_warns(tmp_path: Path) -> None:
    files = _write(tmp_path / "d")
    settings = Settings(data_dir=tmp_path / "state", log_level="WARNING")
    with run_catalog_server(settings) as url:
        cat = sdk.Catalog(url)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ver = cat.register("prof", root=(tmp_path / "d").as_uri(),
                               manifest="manifest.parquet")
        data = [w for w in seen if issubclass(w.category, sdk.DataWarning)]
        assert {type(w.message) for w in data} == {sdk.DataWarning}
        assert issubclass(sdk.DataWarning, sdk.RegistrationWarning)
        kinds = [w["type"] for w in ver.warnings]
        assert kinds == ["null_values", "non_finite_values", "irregular_sampling"]
        assert len(data) == 3
        assert "voltage_v (2 of 360 rows)" in str(data[0].message)
        profile = ver.profile
        assert profile is not None
        by = {c.column: c for c in profile.columns}
        assert set(by) == {"time_s", "voltage_v", "current_a", "cycle"}
        for column, entry in by.items():
            parts = [f[column].astype(np.float64) for f in files.values() if column in f]
            values = np.concatenate(parts)
            nulls = int(np.isnan(values).sum()) + (3 if column == "cycle" else 0)
            assert (entry.rows, entry.nulls, entry.non_finite) == (
                values.size, nulls, int(np.isinf(values).sum())), column
        assert profile.null_counts_from_footer == 1  # the integer column, unread
        assert profile.irregular_segments == {"cycling": 2}
        assert [(s.path, s.gaps, s.non_monotonic) for s in profile.sampling] == [
            ("b.zarr", 1, 0), ("c.parquet", 0, 1)]
        assert "irregularly in 2 segment(s)" in repr(ver)
        stored = cat.version(ver.id)
        assert stored.profile == profile
        assert stored.warnings == []  # the warnings are the registration's answer
        with pytest.warns(sdk.DataWarning, match=r"null or NaN values in cycle \(3 of 120 rows\)"):
            again = cat.register("prof", root=(tmp_path / "d").as_uri(),
                                 manifest="manifest.parquet")
        assert not again.created
        assert again.profile == profile
        cat.close()
