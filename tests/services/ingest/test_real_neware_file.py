"""A real Neware ``.ndax`` file (navani's sample, tests/fixtures/cyclers/README.md)
through ``windpipe ingest``, each value held against what NewareNDA itself reads from
the file: every record written, the current positive on charge, the test's time built
from Neware's step time to the ms (and agreeing with the file's own timestamps), and a
cut-short file refused by name or skipped."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.cyclers import REAL_FILES, ingested, real_file
from windpipe.services.ingest import IngestError, detect_cycler, ingest_exports

NewareNDA = pytest.importorskip("NewareNDA")

NAME = "test.ndax"


def _neware(path: Path) -> Any:
    """The file as NewareNDA reads it, the cycle as the instrument recorded it."""
    return NewareNDA.read(str(path), software_cycle_number=False, log_level="WARNING")


def test_the_sample_file_is_navanis(tmp_path: Path) -> None:
    assert "MIT License" in (REAL_FILES / "LICENSE").read_text()
    listed = dict(re.findall(r"^\| `([^`]+?\.ndax)` \|.*\| `([0-9a-f]{64})` \|$",
                             (REAL_FILES / "README.md").read_text(), flags=re.MULTILINE))
    assert list(listed) == [NAME]
    data = real_file(NAME, tmp_path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == listed[NAME]
    assert data[:4] == b"PK\x03\x04"  # an .ndax is a zip archive


def test_every_record_is_written_as_newarenda_reads_it(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    assert detect_cycler(path) == "neware"
    df = _neware(path)
    n = len(df)
    assert df["Index"].tolist() == list(range(1, n + 1))  # the file's records, in order
    manifest, seg, info = ingested([path], tmp_path / "out")
    cycles = sorted(df["Cycle"].unique())
    assert manifest.select("cidx", "row_count", "cycler").rows() == [
        (int(c) - 1, int((df["Cycle"] == c).sum()), "neware") for c in cycles]
    rows = info["rows"][NAME]
    assert (rows["read"], rows["written"], rows["dropped"]) == (n, n, {})
    assert seg.height == info["n_rows"] == n
    assert seg.get_column("current_a").to_list() == (
        df["Current(mA)"].to_numpy(dtype=np.float64) / 1000).astype(np.float32).tolist()
    assert seg.get_column("voltage_v").to_list() == df["Voltage"].tolist()
    assert "temperature_c" not in seg.columns  # the file has no auxiliary channel
    assert "NewareNDA" in info["library_versions"]


def test_the_current_is_positive_on_charge(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    df = _neware(path)
    _, seg, _ = ingested([path], tmp_path / "out")
    current = seg.get_column("current_a").to_numpy()
    status = df["Status"].astype(str)
    charging = status.str.endswith("_Chg").to_numpy()
    discharging = status.str.endswith("_DChg").to_numpy()
    assert charging.sum() > 100
    assert discharging.sum() > 100
    assert (current[charging] > 0).all()
    assert (current[discharging] < 0).all()
    assert (current[(status == "Rest").to_numpy()] == 0).all()
    volts = seg.get_column("voltage_v").to_numpy()
    rise = np.diff(volts, prepend=volts[0])
    assert rise[charging].mean() > 0 > rise[discharging].mean()


def test_the_time_runs_on_across_steps_to_the_ms(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    df = _neware(path)
    _, seg, info = ingested([path], tmp_path / "out")
    time = seg.get_column("time_s").to_numpy()
    step_time = df["Time"].to_numpy(dtype=np.float64)
    steps = df["Step"].to_numpy()
    assert len(np.unique(steps)) == 4
    starts = np.r_[0, np.flatnonzero(np.diff(steps)) + 1]
    assert (step_time[starts] == 0).all()  # Neware's Time restarts at every step
    same_step = np.diff(steps) == 0
    np.testing.assert_allclose(np.diff(time)[same_step], np.diff(step_time)[same_step],
                               rtol=0, atol=5e-4)
    # the step's time alone would go back at each new step; the test's time never does,
    # and it keeps to the file's own clock (whole seconds there)
    assert (np.diff(time) >= 0).all()
    assert (np.diff(step_time) < 0).sum() == 3
    clock = (df["Timestamp"] - df["Timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    np.testing.assert_allclose(time, clock, rtol=0, atol=1.0)
    assert time[-1] == pytest.approx(300 + 21_600 + 21_600 + 300)
    # a step's first record is at the previous one's last instant (the same timestamp)
    assert info["rows"][NAME]["time_not_increasing"] == {"same time as the previous row": 3}


def test_a_cut_short_file_is_refused_by_name_or_skipped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    real_file(NAME, src)
    whole = (REAL_FILES / NAME).read_bytes()
    (src / "cut.ndax").write_bytes(whole[: len(whole) // 2])
    reason = "NewareNDA could not read it: BadZipFile: File is not a zip file"
    with pytest.raises(IngestError, match=re.escape(f"cut.ndax: {reason}")):
        ingest_exports([src], tmp_path / "stop")
    assert not (tmp_path / "stop" / "manifest.parquet").exists()
    result = ingest_exports([src], tmp_path / "out", on_bad_file="skip")
    assert [(Path(s.file).name, s.reason) for s in result.skipped] == [("cut.ndax", reason)]
    manifest = pl.read_parquet(result.manifest_path)
    assert set(manifest.get_column("cell_id")) == {"test"}
    assert int(manifest.get_column("row_count").sum()) == len(_neware(src / NAME))
