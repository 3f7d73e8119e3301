"""A real Neware ``.nda`` file, the older binary format (navani's sample,
tests/fixtures/cyclers/README.md), through ``windpipe ingest``, each value held against
what NewareNDA itself reads from the file: every record written, the current positive
on charge, the test's time built from Neware's step time to the ms (and agreeing with
the file's own timestamps), and a file NewareNDA cannot read refused by name."""

from __future__ import annotations

import hashlib
import lzma
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.cyclers import REAL_FILES, ingested, real_file
from windpipe.services.ingest import IngestError, detect_cycler, ingest_exports
from windpipe.services.ingest.accounting import SAME_TIME

NewareNDA = pytest.importorskip("NewareNDA")

NAME = "test.nda"


def _neware(path: Path) -> Any:
    """The file as NewareNDA reads it, the cycle as the instrument recorded it."""
    return NewareNDA.read(str(path), software_cycle_number=False, log_level="WARNING")


def test_the_sample_file_is_navanis(tmp_path: Path) -> None:
    assert "MIT License" in (REAL_FILES / "LICENSE").read_text()
    listed = dict(re.findall(r"^\| `([^`]+?\.nda)\.xz` \|.*\| `([0-9a-f]{64})` \|$",
                             (REAL_FILES / "README.md").read_text(), flags=re.MULTILINE))
    assert list(listed) == [NAME]
    data = real_file(NAME, tmp_path).read_bytes()
    assert data == lzma.decompress((REAL_FILES / f"{NAME}.xz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == listed[NAME]
    assert data[:6] == b"NEWARE"
    assert data[14] == 29  # the NDA version, one NewareNDA reads


def test_every_record_is_written_as_newarenda_reads_it(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    assert detect_cycler(path) == "neware"
    df = _neware(path)
    n = len(df)
    assert n == 439
    assert df["Index"].tolist() == list(range(1, n + 1))  # the file's records, in order
    manifest, seg, info = ingested([path], tmp_path / "out")
    assert manifest.select("cell_id", "cidx", "row_count", "cycler").rows() == [
        ("test", 0, n, "neware")]  # the one cycle the instrument recorded (Cycle 1)
    rows = info["rows"][NAME]
    assert (rows["read"], rows["written"], rows["dropped"]) == (n, n, {})
    assert seg.height == info["n_rows"] == n
    assert seg.get_column("current_a").to_list() == (
        df["Current(mA)"].to_numpy(dtype=np.float64) / 1000).astype(np.float32).tolist()
    assert seg.get_column("voltage_v").to_list() == df["Voltage"].tolist()
    assert "temperature_c" not in seg.columns  # the file has no auxiliary channel
    assert "NewareNDA" in info["library_versions"]
    assert info["readers"] == {"neware": "NewareNDA (NewareNDA.read), Neware .ndax and .nda"}


def test_the_current_is_positive_on_charge(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    df = _neware(path)
    _, seg, _ = ingested([path], tmp_path / "out")
    current = seg.get_column("current_a").to_numpy()
    status = df["Status"].astype(str).to_numpy()
    assert sorted(set(status)) == ["CC_Chg", "CC_DChg", "Rest"]
    charging, discharging = status == "CC_Chg", status == "CC_DChg"
    assert (current[charging] >= 0).all()
    assert (current[charging] > 0).sum() == charging.sum() - 1  # a step's first record: 0
    assert (current[discharging] <= 0).all()
    assert (current[discharging] < 0).sum() > 90
    assert (current[status == "Rest"] == 0).all()


def test_the_time_runs_on_across_steps_to_the_ms(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    df = _neware(path)
    _, seg, info = ingested([path], tmp_path / "out")
    time = seg.get_column("time_s").to_numpy()
    step_time = df["Time"].to_numpy(dtype=np.float64)
    steps = df["Step"].to_numpy()
    assert len(np.unique(steps)) == 6
    starts = np.r_[0, np.flatnonzero(np.diff(steps)) + 1]
    assert (step_time[starts] == 0).all()  # Neware's Time restarts at every step
    same_step = np.diff(steps) == 0
    np.testing.assert_allclose(np.diff(time)[same_step], np.diff(step_time)[same_step],
                               rtol=0, atol=5e-4)
    assert (np.diff(time) >= 0).all()  # the step's time alone goes back 5 times
    assert (np.diff(step_time) < 0).sum() == 5
    clock = (df["Timestamp"] - df["Timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    np.testing.assert_allclose(time, clock, rtol=0, atol=1.0)
    # the steps' lengths (5, 25, 50, 100, 500 s) and the last rest's 41.6 s, to the ms
    assert time[-1] == pytest.approx(5 + 25 + 50 + 100 + 500 + 41.6, abs=5e-7)
    assert info["rows"][NAME]["time_not_increasing"] == {SAME_TIME: 5}


def test_a_file_newarenda_cannot_read_is_refused_by_name_or_skipped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    real_file(NAME, src)
    whole = (src / NAME).read_bytes()
    (src / "cut.nda").write_bytes(whole[: len(whole) // 2])
    (src / "other.nda").write_bytes(b"not a Neware file at all\n" * 8)
    cut = "NewareNDA could not read it: EOFError: File does not contain any valid records."
    with pytest.raises(IngestError, match=re.escape(f"cut.nda: {cut}")):
        ingest_exports([src / "cut.nda"], tmp_path / "stop")
    with pytest.raises(IngestError, match=r"other\.nda: NewareNDA could not read it: "
                                          r"ValueError: .*does not appear to be a Neware"):
        ingest_exports([src / "other.nda"], tmp_path / "stop")
    assert not (tmp_path / "stop" / "manifest.parquet").exists()
    result = ingest_exports([src], tmp_path / "out", on_bad_file="skip")
    assert sorted(Path(s.file).name for s in result.skipped) == ["cut.nda", "other.nda"]
    manifest = pl.read_parquet(result.manifest_path)
    assert set(manifest.get_column("cell_id")) == {"test"}
    assert int(manifest.get_column("row_count").sum()) == len(_neware(src / NAME))


def test_the_suffix_tells_the_format_in_lower_case_only(tmp_path: Path) -> None:
    upper = real_file(NAME, tmp_path, as_name="test.NDA")
    assert detect_cycler(upper) is None  # NewareNDA would refuse the name
    assert detect_cycler(real_file(NAME, tmp_path)) == "neware"
