"""battery-data-toolkit's sample of a batteryarchive.org time series
(tests/fixtures/cyclers/README.md) through ``windpipe ingest``, each value held against
the file as pandas reads it (battery-data-toolkit has no reader of these files, only a
writer of BatteryArchive's upload tables): every row kept, the time to the ms, the
current as recorded (positive on charge), and a cut-short file refused by name or
skipped."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

from tests.fixtures.cyclers import REAL_FILES, ingested, real_file
from windpipe.services.ingest import IngestError, detect_cycler, ingest_exports

NAME = "CALCE_CX2-33_prism_LCO_25C_0-100_0.5-0.5C_d_timeseries.csv"
CELL = NAME.removesuffix("_timeseries.csv")


def test_the_sample_file_is_battery_data_toolkits(tmp_path: Path) -> None:
    assert "Apache License" in (REAL_FILES / "LICENSE-battery-data-toolkit").read_text()
    readme = (REAL_FILES / "README.md").read_text()
    listed = dict(re.findall(r"^\| `([^`]+?_timeseries\.csv)` \| `([0-9a-f]{64})` \|",
                             readme, flags=re.MULTILINE))
    assert list(listed) == [NAME]
    data = real_file(NAME, tmp_path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == listed[NAME]
    assert len(data) == 1_146
    assert data.count(b"\n") == 16
    assert b"\r" not in data


def test_battery_data_toolkit_only_writes_batteryarchive_tables() -> None:
    ba = pytest.importorskip("battdat.io.ba")
    from battdat.io.base import DatasetReader  # noqa: PLC0415 (battdat is optional)

    found = [v for v in vars(ba).values() if isinstance(v, type) and issubclass(v, DatasetReader)]
    assert found == []  # when it gains a reader, windpipe should read through it


def test_every_row_is_written_as_the_file_has_it(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    assert detect_cycler(path) == "batteryarchive"
    df = pd.read_csv(path)
    manifest, seg, info = ingested([path], tmp_path / "out")
    assert manifest.select("cell_id", "cidx", "row_count", "cycler").rows() == [
        (CELL, 0, len(df), "batteryarchive")]
    assert df["Cycle_Index"].unique().tolist() == [1.0]  # BatteryArchive counts from 1
    rows = info["rows"][NAME]
    assert (rows["read"], rows["written"], rows["dropped"]) == (len(df), len(df), {})
    np.testing.assert_allclose(seg.get_column("time_s").to_numpy(),
                               df["Test_Time (s)"] - df["Test_Time (s)"].iloc[0],
                               rtol=0, atol=1e-9)
    assert seg.get_column("time_s").to_list()[:2] == [0.0, pytest.approx(30.016, abs=1e-9)]
    for column, source in (("current_a", "Current (A)"), ("voltage_v", "Voltage (V)")):
        assert seg.get_column(column).to_list() == df[source].astype(np.float32).tolist()
    # the cell charges: the current is positive while the voltage rises
    charging = df["Current (A)"].to_numpy() > 0
    assert charging.sum() == 11
    assert (np.diff(df["Voltage (V)"].to_numpy())[charging[1:]] > 0).all()
    # both temperatures are empty in this file: no temperature column, not one of nulls
    assert df[["Environment_Temperature (C)", "Cell_Temperature (C)"]].isna().all().all()
    assert "temperature_c" not in seg.columns


def test_the_summary_file_beside_it_is_no_time_series(tmp_path: Path) -> None:
    summary = tmp_path / f"{CELL}_cycle_data.csv"
    summary.write_text("Cycle_Index,Start_Time,End_Time,Test_Time (s),Min_Current (A)\n"
                       "1.0,2010-09-02 14:35:40,2010-09-02 18:00:00,30.009,0.0\n")
    assert detect_cycler(summary) is None


def test_a_cut_short_file_is_refused_by_name_or_skipped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    real_file(NAME, src)
    whole = (REAL_FILES / NAME).read_bytes()
    cut = src / "CALCE_cut_timeseries.csv"
    cut.write_bytes(whole[:573])  # ends inside data row 7, after its date
    assert detect_cycler(cut) == "batteryarchive"
    reason = "data row 7, column 'Test_Time (s)': is empty; the time column needs a value in " \
             "every row"
    with pytest.raises(IngestError, match=re.escape(f"CALCE_cut_timeseries.csv, {reason}")):
        ingest_exports([src], tmp_path / "stop")
    assert not (tmp_path / "stop" / "manifest.parquet").exists()
    result = ingest_exports([src], tmp_path / "out", on_bad_file="skip")
    assert [(Path(s.file).name, s.reason) for s in result.skipped] == [
        ("CALCE_cut_timeseries.csv", reason)]
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.select("cell_id", "row_count").rows() == [(CELL, 15)]
