"""Arbin CSV exports (``Data_Point, Test_Time, DateTime, Step_Time, Step_Index,
Cycle_Index, Current, Voltage, ..., Temperature``), read with pandas in
battery-data-toolkit's column mapping.

**Why not battery-data-toolkit's own reader.** ``battdat.io.arbin.ArbinReader`` (0.4)
changes the data in two ways no option turns off (its ``read_file`` reads the file and
does both):

- it takes the time from ``DateTime``, the wall clock in whole seconds, instead of
  ``Test_Time``, the test's clock in seconds to 0.1 ms: rows within one second get
  one time, a step of 0 s (173 kept in battdat's own ``arbin_example.csv``);
- it drops, through ``battdat.utils.drop_cycles``, every row whose time (rounded to
  0.01 s), voltage and current equal an earlier row's. On whole seconds that takes out
  the records Arbin writes 0.1 ms after a measurement with the same voltage and current
  and a new auxiliary reading (the temperature): 516 of the 2,142 rows of that file.
  On ``Test_Time`` it would still drop 514 of them (0.1 ms apart: one time at 0.01 s).

A dropped row cannot be restored afterwards, so windpipe reads the file with the same
``pandas.read_csv`` call and maps the columns as that reader does: ``Cycle_Index``
counted from 0 (the first file's lowest index is cycle 0; each further file of the
test continues after the previous file's last cycle), ``Current`` as recorded (Arbin's
sign is windpipe's: positive on charge), ``Voltage``, ``Temperature`` where the file
has it; and the time is ``Test_Time`` (``time_s`` of a segment: seconds since the
cycle's first row, to the file's 0.1 ms).

**What is dropped, and what is kept.** The one row left out is a row that repeats the
previous one in everything a segment holds (time, cycle, step, current, voltage,
temperature): it adds nothing and its step would be 0 s. It is counted
(:data:`REPEATED`) in ``ingest.json``. Every other row is kept as the file has it,
including one whose time does not advance past the previous row's: a segment's rows
need not increase in time (registration warns of such steps), and which of two
disagreeing rows is right is not the reader's to decide; the writer counts them in the
summary, by whether the step index changed there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from windpipe.services.ingest.base import IngestError, Measurement, failed
from windpipe.services.ingest.checks import LAYOUTS, check_csv, import_reader
from windpipe.services.ingest.continued import FilePart, read_in_turn

__all__ = ["REPEATED", "arbin_frame", "read_arbin", "without_repeats"]

REPEATED = "repeats the previous row (time, cycle, step, current, voltage, temperature)"
"""The reason a row of an Arbin file is dropped (``ingest.json``, ``rows``)."""

_COLUMNS = {"Cycle_Index": "cycle", "Test_Time": "test_time_s", "Current": "current_a",
            "Voltage": "voltage_v", "Temperature": "temperature_c", "Step_Index": "step"}


def _repeats(frame: pl.DataFrame) -> np.ndarray:
    """Rows equal to the previous row in every column (a missing value equals a missing
    value); the first row repeats nothing."""
    same = np.ones(frame.height, dtype=bool)
    same[0] = False
    for name in frame.columns:
        values = frame.get_column(name).cast(pl.Float64).fill_null(np.nan).to_numpy()
        now, before = values[1:], values[:-1]
        same[1:] &= (now == before) | (np.isnan(now) & np.isnan(before))
    return same


def arbin_frame(path: Path, raw: Any, first_cycle: int) -> pl.DataFrame:
    """The rows of ``raw`` (pandas, Arbin's column names: a CSV export's or a ``.res``
    file's ``Channel_Normal_Table``) as time-series columns, its cycles counted from
    ``first_cycle``."""
    if raw.empty:
        raise IngestError(path, "holds no data rows")
    cycle = raw["Cycle_Index"].to_numpy(dtype=np.int64)
    cols: dict[str, np.ndarray] = {"cycle": cycle - cycle.min() + first_cycle}
    for source, name in _COLUMNS.items():
        if source in raw.columns and source != "Cycle_Index":
            dtype = np.int64 if name == "step" else np.float64
            cols[name] = raw[source].to_numpy(dtype=dtype)
    return pl.DataFrame(cols)


def without_repeats(rows: int, frame: pl.DataFrame) -> FilePart:
    """One file's ``rows`` with the rows of ``frame`` that repeat the previous one left
    out and counted (:data:`REPEATED`)."""
    repeats = _repeats(frame)
    return FilePart(rows, frame.filter(pl.Series(~repeats)), {REPEATED: int(repeats.sum())})


def _read_file(path: Path, first_cycle: int) -> FilePart:
    """One CSV file's rows as time-series columns, its cycles counted from ``first_cycle``."""
    rows = check_csv(path, LAYOUTS["arbin"])
    pd = import_reader("pandas")
    layout = LAYOUTS["arbin"]
    try:
        header = pd.read_csv(path, nrows=0).columns
        use = [c for c in (*layout.columns, *layout.optional) if c in header]
        raw = pd.read_csv(path, usecols=use)
    except Exception as exc:  # check_csv read it a moment ago: a file changed under us
        raise failed(path, "pandas", exc) from exc
    return without_repeats(rows, arbin_frame(path, raw, first_cycle))


def read_arbin(files: Sequence[Path]) -> list[Measurement]:
    """The time series of one test's Arbin CSV ``files`` (in order), every row of them
    either in the frame or counted in :attr:`Measurement.dropped` (see the module's
    docstring)."""
    return read_in_turn(files, _read_file)
