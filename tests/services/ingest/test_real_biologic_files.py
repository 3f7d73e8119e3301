"""Real BioLogic EC-Lab files (navani's sample data, tests/fixtures/cyclers/README.md)
through ``windpipe ingest``, each value held against what galvani itself reads from the
file: a GCPL file without ``I/mA``, ModuloBat files, OCV files, numbered technique
files of one cell, and a mixed folder with a file that cannot be taken."""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.cyclers import REAL_FILES, real_file
from windpipe.cli import main
from windpipe.services.ingest import ingest_exports
from windpipe.services.ingest.biologic import current_ma, technique_of

BioLogic = pytest.importorskip("galvani.BioLogic")

GCPL = "jdb11-1_c3_gcpl_5cycles_2V-3p8V_C-24_data_C09.mpr"
MB = ("00_test_02_MB_C01.mpr", "00_test_04_MB_C01.mpr")
OCV = ("00_test_01_OCV_C01.mpr", "00_test_02_OCV_C01.mpr")
EXPERIMENT = r"^(?P<cell>.+?)_\d+_[A-Za-z]+_C\d+"  # 00_test_04_MB_C01.mpr: cell 00_test


def _galvani(path: Path) -> Any:
    """The file as galvani reads it (the reader's own API; its numpy deprecation
    warnings are galvani's, not what these tests hold)."""
    with warnings.catch_warnings(), path.open("rb") as handle:
        warnings.simplefilter("ignore", DeprecationWarning)
        return BioLogic.MPRfile(handle)


def _segments(result_path: Path, manifest: pl.DataFrame) -> pl.DataFrame:
    """A manifest's segments, in its order, as one frame."""
    return pl.concat([pl.read_parquet(result_path / p)
                      for p in manifest.get_column("segment_path")])


def test_the_sample_files_are_the_published_ones(tmp_path: Path) -> None:
    names = sorted(p.name for p in REAL_FILES.iterdir() if ".mpr" in p.name)
    assert names == sorted([*MB, *OCV, f"{GCPL}.xz"])
    assert "MIT License" in (REAL_FILES / "LICENSE").read_text()
    assert max((REAL_FILES / n).stat().st_size for n in names) < 2_000_000
    # byte for byte what navani's sdist holds: the digests its README lists
    listed = dict(re.findall(r"^\| `([^`]+?\.mpr)(?:\.xz)?` \|.*\| `([0-9a-f]{64})` \|$",
                             (REAL_FILES / "README.md").read_text(), flags=re.MULTILINE))
    assert sorted(listed) == sorted([GCPL, *MB, *OCV])
    for name, digest in listed.items():
        assert hashlib.sha256(real_file(name, tmp_path).read_bytes()).hexdigest() == digest


def test_a_gcpl_file_without_a_current_column_gets_it_from_its_charge(tmp_path: Path) -> None:
    path = real_file(GCPL, tmp_path / "src")
    data = _galvani(path).data
    assert "I/mA" not in data.dtype.names  # what made EC-Lab's GCPL files fail before
    result = ingest_exports([path], tmp_path / "out")
    manifest = pl.read_parquet(result.manifest_path)
    cycle = data["half cycle"] // 2  # no cycle number column: two half cycles a cycle
    assert manifest.select("cidx", "protocol").rows() == [
        (int(c), "cycling") for c in np.unique(cycle)]
    assert manifest.get_column("row_count").to_list() == np.bincount(cycle).tolist()
    seg = _segments(result.path, manifest)
    time = np.asarray(data["time/s"])
    starts = np.r_[0, np.flatnonzero(np.diff(cycle)) + 1]
    first = np.repeat(time[starts], np.diff(np.r_[starts, len(time)]))
    np.testing.assert_allclose(seg.get_column("time_s").to_numpy(), time - first)
    assert seg.get_column("voltage_v").to_list() == data["Ewe/V"].astype(np.float32).tolist()
    # the derived current, integrated over each record's interval, is the file's charge
    current = seg.get_column("current_a").to_numpy()  # A; null before the first interval
    assert np.isnan(current[0])
    assert not np.isnan(current[1:]).any()
    dt = np.diff(time, prepend=time[0])
    dq = data["dq/mA.h"]
    np.testing.assert_allclose(current[1:] * 1000 * dt[1:] / 3600, dq[1:], rtol=1e-6,
                               atol=1e-12)
    total = np.cumsum(np.r_[0.0, current[1:] * 1000 * dt[1:] / 3600])
    np.testing.assert_allclose(total, data["(Q-Qo)/mA.h"], rtol=0, atol=1e-6)
    # positive on charge: the voltage rises while the current is positive
    volts = seg.get_column("voltage_v").to_numpy()
    rise = np.diff(volts, prepend=volts[0])
    assert rise[current > 0].mean() > 0 > rise[current < 0].mean()
    info = json.loads((result.path / "ingest.json").read_text())
    assert info["current_from"] == {GCPL: "dq/mA.h"}


def test_the_control_column_and_the_charge_give_one_current(tmp_path: Path) -> None:
    # without charge columns the set current of galvanostatic records is the current
    path = real_file(GCPL, tmp_path)
    mpr = _galvani(path)
    mode = mpr.get_flag("mode").astype(np.int64)
    from_charge, source = current_ma(path, mpr.data, mode=mode)
    assert source == "dq/mA.h"
    names = [n for n in mpr.data.dtype.names if n not in ("dq/mA.h", "(Q-Qo)/mA.h")]
    control_only = mpr.data[names]
    from_control, source = current_ma(path, control_only, mode=mode)
    assert source == "control/V/mA (mode)"
    assert set(np.unique(mode)) == {1, 3}  # galvanostatic and rest records
    assert (from_control[mode == 3] == 0).all()
    agree = np.abs(from_control[1:] - from_charge[1:]) < 1e-4  # mA, of 0.089 mA set
    assert agree.mean() > 0.99  # all but the records where a step changed the set current


@pytest.mark.parametrize("name", MB)
def test_a_modulobat_file_keeps_its_measured_current(tmp_path: Path, name: str) -> None:
    path = real_file(name, tmp_path / "src")
    data = _galvani(path).data
    result = ingest_exports([path], tmp_path / "out")
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.select("cidx", "protocol", "row_count").rows() == [
        (0, "cycling", len(data))]
    seg = _segments(result.path, manifest)
    assert seg.get_column("current_a").to_list() == (
        data["I/mA"].astype(np.float64) / 1000).astype(np.float32).tolist()
    assert seg.get_column("voltage_v").to_list() == data["Ewe/V"].astype(np.float32).tolist()
    np.testing.assert_allclose(seg.get_column("time_s").to_numpy(),
                               data["time/s"] - data["time/s"][0])
    # the charge the file records agrees with its measured current (within 1 % overall)
    names = [n for n in data.dtype.names if n != "I/mA"]
    derived, source = current_ma(path, data[names])
    assert source == "dq/mA.h"
    dt = np.diff(data["time/s"])
    measured = np.sum(data["I/mA"][1:] * dt)
    assert np.sum(derived[1:] * dt) == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("name", OCV)
def test_an_ocv_file_is_an_open_circuit_segment(tmp_path: Path, name: str) -> None:
    path = real_file(name, tmp_path / "src")
    data = _galvani(path).data
    assert set(data.dtype.names) == {"flags", "time/s", "Ewe/V"}
    result = ingest_exports([path], tmp_path / "out")
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.select("cidx", "protocol", "row_count").rows() == [(0, "ocv", len(data))]
    seg = _segments(result.path, manifest)
    assert seg.get_column("current_a").to_list() == [0.0] * len(data)  # open circuit
    assert seg.get_column("voltage_v").to_list() == data["Ewe/V"].astype(np.float32).tolist()


def test_the_numbered_technique_files_of_one_cell_all_ingest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for name in (*MB, *OCV):
        real_file(name, src)
    assert [technique_of(src / n) for n in MB] == [
        technique_of(src / "x_02_MB_C01.mpr"), technique_of(src / "x_04_MB_C01.mpr")]
    result = ingest_exports([src], tmp_path / "out", cell_pattern=EXPERIMENT)
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.select("cell_id", "cidx", "protocol", "source_files").rows() == [
        ("00_test", 0, "cycling", MB[0]), ("00_test", 0, "ocv", OCV[0]),
        ("00_test", 1, "cycling", MB[1]), ("00_test", 1, "ocv", OCV[1])]
    for source, rows in zip(manifest.get_column("source_files"),
                            manifest.get_column("row_count"), strict=True):
        assert rows == len(_galvani(src / source).data)


def test_a_mixed_ec_lab_folder_ingests_what_it_can_and_names_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "real"
    real_file(GCPL, src)
    for name in OCV:
        real_file(name, src)
    whole = (REAL_FILES / MB[1]).read_bytes()
    (src / "00_test_05_MB_C01.mpr").write_bytes(whole[: len(whole) // 2])  # cut short
    assert main(["ingest", str(src), "--out", str(tmp_path / "stop")]) == 1
    assert "00_test_05_MB_C01.mpr: galvani could not read it: OSError: Unexpected end of " \
           "file" in capsys.readouterr().err
    assert not (tmp_path / "stop" / "manifest.parquet").exists()
    out = tmp_path / "all"
    assert main(["ingest", str(src), "--out", str(out), "--on-bad-file", "skip"]) == 0
    said = capsys.readouterr().out
    assert f"skipped 1 files (listed in ingest.json):\n  {src / '00_test_05_MB_C01.mpr'}: " \
           "galvani could not read it: OSError: Unexpected end of file" in said
    manifest = pl.read_parquet(out / "manifest.parquet")
    assert sorted(set(manifest.select("cell_id", "protocol").rows())) == [
        ("00_test_01_OCV_C01", "ocv"), ("00_test_02_OCV_C01", "ocv"),
        (GCPL.removesuffix(".mpr"), "cycling")]
    assert not any("05_MB" in str(p) for p in out.rglob("*"))
    info = json.loads((out / "ingest.json").read_text())
    assert [Path(s["file"]).name for s in info["skipped"]] == ["00_test_05_MB_C01.mpr"]
    assert info["skipped"][0]["reason"].startswith("galvani could not read it: OSError")
    assert int(manifest.get_column("row_count").sum()) == sum(
        len(_galvani(src / n).data) for n in (GCPL, *OCV))
