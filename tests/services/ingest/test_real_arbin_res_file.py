"""A real Arbin ``.res`` file (navani's sample, tests/fixtures/cyclers/README.md) through
``windpipe ingest``, each value held against what galvani's ``res2sqlite`` itself reads
from the file's ``Channel_Normal_Table``: every row written in the Arbin CSV reader's
mapping, a cell's files continuing each other's cycles, a damaged file refused by name
(mdb-export would hand over part of it), and a clear error naming mdbtools where
``mdb-export`` is not installed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.cyclers import REAL_FILES, ingested, real_file
from windpipe.services.ingest import IngestError, MissingToolError, detect_cycler, ingest_exports

res2sqlite = pytest.importorskip("galvani.res2sqlite")
pd = pytest.importorskip("pandas")

NAME = "arbin_example.res"
needs_mdbtools = pytest.mark.skipif(
    shutil.which("mdb-export") is None,
    reason="mdbtools' mdb-export is not installed (apt-get install mdbtools; .ci/run does)")


def _galvani(path: Path) -> Any:
    """The file's ``Channel_Normal_Table`` as galvani converts it, in data-point order."""
    with contextlib.redirect_stdout(io.StringIO()):
        db: sqlite3.Connection = res2sqlite.convert_arbin_to_sqlite(str(path), None)
    try:
        return pd.read_sql_query("SELECT * FROM Channel_Normal_Table ORDER BY Data_Point", db)
    finally:
        db.close()


def test_the_sample_file_is_navanis(tmp_path: Path) -> None:
    assert "MIT License" in (REAL_FILES / "LICENSE").read_text()
    listed = dict(re.findall(r"^\| `([^`]+?\.res)\.xz` \|.*\| `([0-9a-f]{64})` \|$",
                             (REAL_FILES / "README.md").read_text(), flags=re.MULTILINE))
    assert list(listed) == [NAME]
    data = real_file(NAME, tmp_path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == listed[NAME]
    assert len(data) == 532_480
    assert data[4:19] == b"Standard Jet DB"  # an MS Access database
    assert detect_cycler(tmp_path / NAME) == "arbin_res"


@needs_mdbtools
def test_every_row_is_written_as_galvani_reads_it(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    df = _galvani(path)
    n = len(df)
    assert n == 2_150
    assert df["Data_Point"].tolist() == list(range(1, n + 1))
    assert set(df["Test_ID"]) == {1}
    manifest, seg, info = ingested([path], tmp_path / "out")
    cycles = sorted(df["Cycle_Index"].unique())
    assert cycles == [1, 2, 3, 4, 5]
    assert manifest.select("cell_id", "cidx", "row_count", "cycler").rows() == [
        ("arbin_example", i, int((df["Cycle_Index"] == c).sum()), "arbin_res")
        for i, c in enumerate(cycles)]
    assert info["rows"][NAME] == {"read": n, "written": n, "dropped": {},
                                  "time_not_increasing": {}}
    assert seg.height == info["n_rows"] == n
    first = df.groupby("Cycle_Index")["Test_Time"].transform("first")
    np.testing.assert_allclose(seg.get_column("time_s").to_numpy(), df["Test_Time"] - first,
                               rtol=0, atol=1e-9)
    for column, source in (("current_a", "Current"), ("voltage_v", "Voltage")):
        assert seg.get_column(column).to_list() == df[source].astype(np.float32).tolist()
    assert "temperature_c" not in seg.columns  # the auxiliary channels are not read
    assert "galvani" in info["library_versions"]
    assert "res2sqlite" in info["readers"]["arbin_res"]


@needs_mdbtools
def test_the_current_is_positive_on_charge(tmp_path: Path) -> None:
    path = real_file(NAME, tmp_path / "src")
    df = _galvani(path)
    _, seg, _ = ingested([path], tmp_path / "out")
    current = seg.get_column("current_a").to_numpy()
    volts = seg.get_column("voltage_v").to_numpy()
    step = df["Step_Index"].to_numpy()
    charge, discharge = step == 2, step == 3  # the schedule: rest, charge, discharge, ...
    assert (current[charge] > 0).all()
    assert (current[discharge] < 0).all()
    assert (current[(step == 1) | (step >= 4)] == 0).all()
    rise = np.diff(volts, prepend=volts[0])
    assert rise[charge].mean() > 0 > rise[discharge].mean()


@needs_mdbtools
def test_a_cells_files_continue_each_others_cycles(tmp_path: Path) -> None:
    src = tmp_path / "src"
    first = real_file(NAME, src, as_name="cellA_part1.res")
    second = real_file(NAME, src, as_name="cellA_part2.res")
    n = len(_galvani(first))
    manifest, seg, info = ingested([first, second], tmp_path / "out",
                                  cell_pattern=r"^(?P<cell>[^_]+)_")
    assert manifest.get_column("cidx").to_list() == list(range(10))
    assert set(manifest.get_column("cell_id")) == {"cellA"}
    assert seg.height == 2 * n
    rows = info["rows"]["cellA_part1.res, cellA_part2.res"]
    assert (rows["read"], rows["written"], rows["dropped"]) == (2 * n, 2 * n, {})


@needs_mdbtools
def test_a_damaged_file_is_refused_by_name_or_skipped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    whole = real_file(NAME, src).read_bytes()
    # cut at a page: mdb-export reads what is left and says so on its standard error
    (src / "cut.res").write_bytes(whole[: len(whole) * 9 // 10 // 4096 * 4096])
    (src / "other.res").write_bytes(b"not an Access database\n" * 40)
    with pytest.raises(IngestError, match=r"cut\.res: .*could not read all of it "
                                          r"\(mdb-export said .*\): the file is damaged"):
        ingest_exports([src / "cut.res"], tmp_path / "stop")
    with pytest.raises(IngestError, match=r"other\.res: is no Access database"):
        ingest_exports([src / "other.res"], tmp_path / "stop")
    assert not (tmp_path / "stop" / "manifest.parquet").exists()
    result = ingest_exports([src], tmp_path / "out", on_bad_file="skip")
    assert sorted(Path(s.file).name for s in result.skipped) == ["cut.res", "other.res"]
    manifest = pl.read_parquet(result.manifest_path)
    assert set(manifest.get_column("cell_id")) == {"arbin_example"}
    assert int(manifest.get_column("row_count").sum()) == 2_150


def test_without_mdb_export_the_error_names_mdbtools(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = real_file(NAME, tmp_path / "src")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # a system where mdbtools is not installed
    for on_bad_file in ("stop", "skip"):  # the system's fault, not the file's: never skipped
        with pytest.raises(MissingToolError, match=r"needs mdb-export from mdbtools on the "
                                                   r"PATH: apt-get install mdbtools"):
            ingest_exports([path], tmp_path / on_bad_file, on_bad_file=on_bad_file)
    assert isinstance(MissingToolError("x"), ImportError)  # what the CLI reports as such
