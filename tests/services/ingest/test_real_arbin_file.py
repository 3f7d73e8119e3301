"""battery-data-toolkit's own Arbin sample file (tests/fixtures/cyclers/README.md)
through ``windpipe ingest``, each value held against the file as pandas reads it: the
time is ``Test_Time`` to 0.1 ms (not ``DateTime``'s whole seconds), every row is kept
(the file repeats no row whole), battdat's own reader would have kept fewer, and the
same file with ``Test_Time`` to the millisecond and two pairs of rows out of order has
exact repeats, steps of 0 s and steps back in time, dropped or counted as the reader
and the summary say."""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.fixtures.cyclers import REAL_FILES, ingested, real_file
from windpipe.services.ingest import read_cell
from windpipe.services.ingest.accounting import BACK_AT_STEP, BACK_IN_STEP, SAME_TIME, account
from windpipe.services.ingest.arbin import REPEATED

NAME = "arbin_example.csv"
KEPT = ["Test_Time", "Cycle_Index", "Step_Index", "Current", "Voltage", "Temperature"]
"""The columns of the file a segment holds (time, cycle, step, current, voltage,
temperature): a row equal to the previous one in all of them is an exact repeat."""
SWAPPED = ((5, 6), (17, 18), (329, 330))
"""Data points put out of order in the coarser export: twice two rows of one charge
step, and the last row of the charge with the first of the discharge (step 11 to 12)."""


def _published(folder: Path) -> Path:
    return real_file(NAME, folder)


def _in_ms_out_of_order(folder: Path) -> Path:
    """The sample file with ``Test_Time`` rounded to the millisecond (a record 0.1 ms
    after a measurement can get its time) and the rows of :data:`SWAPPED` exchanged;
    every other character as published."""
    lines = _published(folder / "published").read_bytes().decode().split("\r\n")
    assert lines[-1] == ""  # the file ends with a line end
    rows = [line.split(",") for line in lines[1:-1]]
    for row in rows:
        row[1] = str(Decimal(row[1]).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))
    for a, b in SWAPPED:
        rows[a - 1], rows[b - 1] = rows[b - 1], rows[a - 1]
    target = folder / "arbin_example_ms.csv"
    target.write_bytes("\r\n".join([lines[0], *(",".join(r) for r in rows), ""]).encode())
    return target


EXPORTS: dict[str, Callable[[Path], Path]] = {
    "as published": _published,
    "Test_Time in ms, rows out of order": _in_ms_out_of_order,
}


def _repeats(df: pd.DataFrame) -> pd.Series:
    """Rows equal to the previous row in every column of :data:`KEPT`."""
    return df[KEPT].eq(df[KEPT].shift()).all(axis=1)


def _time_steps(kept: pd.DataFrame) -> dict[str, int]:
    """Rows whose ``Test_Time`` does not pass the previous row's of their cycle, by
    kind, counted straight from the rows of the file a segment keeps."""
    cycle = kept.groupby("Cycle_Index", sort=False)
    dt = cycle["Test_Time"].diff()
    step_changed = cycle["Step_Index"].diff().ne(0) & dt.notna()
    found = {SAME_TIME: int((dt == 0).sum()),
             BACK_AT_STEP: int(((dt < 0) & step_changed).sum()),
             BACK_IN_STEP: int(((dt < 0) & ~step_changed).sum())}
    return {kind: n for kind, n in found.items() if n}


def test_the_sample_file_is_battery_data_toolkits(tmp_path: Path) -> None:
    ours = sorted(p.name for p in REAL_FILES.iterdir()
                  if ("arbin" in p.name and not p.name.endswith(".res.xz"))  # navani's
                  or "battery-data-toolkit" in p.name)
    assert ours == ["LICENSE-battery-data-toolkit", f"{NAME}.xz"]
    assert "Apache License" in (REAL_FILES / "LICENSE-battery-data-toolkit").read_text()
    listed = dict(re.findall(r"^\| `([^`]+?\.csv)(?:\.xz)?` \|.*\| `([0-9a-f]{64})` \|$",
                             (REAL_FILES / "README.md").read_text(), flags=re.MULTILINE))
    assert list(listed) == [NAME]
    data = _published(tmp_path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == listed[NAME]
    # whole, not an excerpt: the header and 2,142 rows, CRLF as the repository holds it
    assert len(data) == 284_095
    assert data.count(b"\r\n") == data.count(b"\n") == 2_143
    df = pd.read_csv(tmp_path / NAME)
    assert df["Data_Point"].tolist() == list(range(1, 2_143))


def test_every_row_is_written_with_its_test_time_to_a_tenth_of_a_millisecond(
        tmp_path: Path) -> None:
    path = _published(tmp_path / "src")
    df = pd.read_csv(path)
    manifest, seg, info = ingested([path], tmp_path / "out")
    assert not _repeats(df).any()  # no row repeats the previous one whole: all are kept
    assert _time_steps(df) == {}  # and Test_Time always advances within a cycle
    cycles = sorted(df["Cycle_Index"].unique())
    assert manifest.select("cidx", "row_count").rows() == [
        (cidx, int((df["Cycle_Index"] == c).sum())) for cidx, c in enumerate(cycles)]
    assert cycles == [1, 2]
    assert seg.height == info["n_rows"] == len(df)
    first = df.groupby("Cycle_Index")["Test_Time"].transform("first")
    time = seg.get_column("time_s").to_numpy()
    np.testing.assert_allclose(time, df["Test_Time"] - first, rtol=0, atol=5e-5)
    # the records Arbin writes 0.1 ms after a measurement (the same voltage and current,
    # a new temperature) keep their own time: whole seconds would give both one time
    tenth_ms = np.isclose(df.groupby("Cycle_Index")["Test_Time"].diff(), 1e-4, rtol=0,
                          atol=1e-6)
    assert int(tenth_ms.sum()) == 516
    dt = seg.get_column("dt_s").to_numpy()
    np.testing.assert_allclose(dt[tenth_ms], 1e-4, rtol=0, atol=1e-6)
    assert int(((dt > 0) & (dt < 1e-3)).sum()) == 516
    whole_seconds = df["DateTime"] - df.groupby("Cycle_Index")["DateTime"].transform("first")
    assert np.abs(time - whole_seconds).max() > 0.5  # DateTime would be another clock
    for column, source in (("current_a", "Current"), ("voltage_v", "Voltage"),
                           ("temperature_c", "Temperature")):
        assert seg.get_column(column).to_list() == df[source].astype(np.float32).tolist()


def test_an_export_in_ms_with_rows_out_of_order_is_written_as_the_file_has_it(
        tmp_path: Path) -> None:
    path = _in_ms_out_of_order(tmp_path / "src")
    df = pd.read_csv(path)
    repeats = _repeats(df)
    kept = df[~repeats]
    steps = _time_steps(kept)
    # what the coarser file holds: a record now at its measurement's time, with the same
    # temperature (rows 1,116 and 1,117) an exact repeat, and the three steps back
    assert df.loc[repeats, "Data_Point"].tolist() == [1_117]
    assert steps == {SAME_TIME: steps[SAME_TIME], BACK_IN_STEP: 2, BACK_AT_STEP: 1}
    assert steps[SAME_TIME] > 100
    manifest, seg, _ = ingested([path], tmp_path / "out")
    assert seg.height == len(df) - 1 == int(manifest.get_column("row_count").sum())
    first = kept.groupby("Cycle_Index")["Test_Time"].transform("first")
    np.testing.assert_allclose(seg.get_column("time_s").to_numpy(), kept["Test_Time"] - first,
                               rtol=0, atol=5e-5)
    for column, source in (("current_a", "Current"), ("voltage_v", "Voltage"),
                           ("temperature_c", "Temperature")):
        assert seg.get_column(column).to_list() == kept[source].astype(np.float32).tolist()
    dt = seg.get_column("dt_s").to_numpy()
    assert int((dt < 0).sum()) == 3  # kept: which of two rows is right is not ours to say
    assert int((dt == 0).sum()) == steps[SAME_TIME] + manifest.height  # + each first row


@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_the_reader_accounts_for_every_row(tmp_path: Path, export: str) -> None:
    path = EXPORTS[export](tmp_path / "src")
    df = pd.read_csv(path)
    repeats = _repeats(df)
    n = int(repeats.sum())
    [rows] = account("arbin", path, read_cell("arbin", [path]))
    assert rows.as_json() == {"read": len(df), "written": len(df) - n,
                              "dropped": {REPEATED: n} if n else {},
                              "time_not_increasing": _time_steps(df[~repeats])}
    assert rows.files == path.name


@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_ingest_json_says_what_became_of_every_row(tmp_path: Path, export: str) -> None:
    path = EXPORTS[export](tmp_path / "src")
    df = pd.read_csv(path)
    repeats = _repeats(df)
    n = int(repeats.sum())
    _, seg, info = ingested([path], tmp_path / "out")
    assert seg.height + n == len(df)
    assert info["rows"] == {path.name: {"read": len(df), "written": seg.height,
                                        "dropped": {REPEATED: n} if n else {},
                                        "time_not_increasing": _time_steps(df[~repeats])}}


def test_battdats_own_reader_would_keep_fewer_rows_on_whole_seconds(tmp_path: Path) -> None:
    """Why windpipe reads Arbin files itself (windpipe/services/ingest/arbin.py): battdat 0.4's
    ``ArbinReader`` takes its time from ``DateTime`` and drops every row whose time
    (to 0.01 s), voltage and current an earlier row has."""
    arbin = pytest.importorskip("battdat.io.arbin")
    drop_cycles = pytest.importorskip("battdat.utils").drop_cycles
    path = _published(tmp_path / "src")
    df = pd.read_csv(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = arbin.ArbinReader().read_file(str(path))
    same_second = df.duplicated(subset=["DateTime", "Voltage", "Current"])
    assert int(same_second.sum()) == 516
    assert len(theirs) == len(df) - 516
    time = theirs["test_time"].to_numpy()
    np.testing.assert_array_equal(time, np.round(time))
    assert (df["Test_Time"] % 1 != 0).mean() > 0.9  # the file's own clock has fractions
    zero = theirs.groupby("cycle_number")["test_time"].diff() == 0
    kept = df[~same_second]
    assert int(zero.sum()) == int((kept.groupby("Cycle_Index")["DateTime"].diff() == 0).sum())
    assert int(zero.sum()) == 173
    # on Test_Time its drop would still take the records 0.1 ms apart (one time at 0.01 s)
    on_test_time = pd.DataFrame({"test_time": df["Test_Time"] - df["Test_Time"][0],
                                 "voltage": df["Voltage"], "current": df["Current"]})
    rounded = on_test_time.assign(test_time=on_test_time["test_time"].round(2))
    gone = int(rounded.duplicated(subset=["test_time", "voltage", "current"]).sum())
    assert gone == 514
    assert len(df) - len(drop_cycles(on_test_time)) == gone
    manifest, _, _ = ingested([path], tmp_path / "out")
    assert int(manifest.get_column("row_count").sum()) == len(df)
