"""BatteryArchive CSV (batteryarchive.org's ``<cell>_timeseries.csv`` downloads:
``Date_Time, Test_Time (s), Cycle_Index, Current (A), Voltage (V), Charge_Capacity (Ah),
..., Environment_Temperature (C), Cell_Temperature (C)``), read with pandas in
battery-data-toolkit's column mapping.

**Why not a battery-data-toolkit reader.** battery-data-toolkit 0.4 has none for these
files: ``battdat.io.ba`` only *writes* BatteryArchive's upload tables (``i``, ``v``,
``cycle_index``, ...: not the download's columns). Its earlier
``BatteryArchiveExtractor`` (the ``batdata`` package, removed since) read the download
with one ``pandas.read_csv`` and renamed the columns; windpipe does the same, so nothing
is changed or left out:

- ``Cycle_Index`` (from 1 in BatteryArchive) counted from 0: the first file's lowest
  index is cycle 0; a further file of the cell continues after the previous file's last
  cycle;
- ``Test_Time (s)`` as recorded (to the ms); ``Current (A)`` as recorded (BatteryArchive
  records it positive on charge, windpipe's convention); ``Voltage (V)``;
- ``Cell_Temperature (C)`` where the file gives one (``Environment_Temperature (C)`` is
  the chamber's, not the cell's, so it is not used; a file whose cell temperature is
  empty throughout has no temperature).

Every row is kept (:class:`~services.ingest.base.Measurement` ``dropped`` is empty); an
empty current or voltage is a missing value, an empty or non-numeric time or cycle is
refused with its row (:func:`~services.ingest.checks.check_csv`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from windpipe.services.ingest.base import IngestError, Measurement, failed
from windpipe.services.ingest.checks import CsvLayout, check_csv, import_reader
from windpipe.services.ingest.continued import FilePart, read_in_turn

__all__ = ["LAYOUT", "read_batteryarchive"]

LAYOUT = CsvLayout("BatteryArchive CSV", {
    "Test_Time (s)": "time", "Cycle_Index": "cycle", "Current (A)": "value",
    "Voltage (V)": "value"}, optional={"Cell_Temperature (C)": "value"})
"""The columns the reader needs (and the optional cell temperature), checked first."""

_COLUMNS = {"Test_Time (s)": "test_time_s", "Current (A)": "current_a",
            "Voltage (V)": "voltage_v", "Cell_Temperature (C)": "temperature_c"}


def _read_file(path: Path, first_cycle: int) -> FilePart:
    rows = check_csv(path, LAYOUT)
    pd = import_reader("pandas")
    try:
        header = pd.read_csv(path, nrows=0).columns
        use = [c for c in (*LAYOUT.columns, *LAYOUT.optional) if c in header]
        raw = pd.read_csv(path, usecols=use)
    except Exception as exc:  # check_csv read it a moment ago: a file changed under us
        raise failed(path, "pandas", exc) from exc
    if raw.empty:
        raise IngestError(path, "holds no data rows")
    cycle = raw["Cycle_Index"].to_numpy(dtype=np.float64).astype(np.int64)
    cols: dict[str, np.ndarray] = {"cycle": cycle - cycle.min() + first_cycle}
    for source, name in _COLUMNS.items():
        if source in raw.columns and raw[source].notna().any():
            cols[name] = raw[source].to_numpy(dtype=np.float64)
    return FilePart(rows, pl.DataFrame(cols).with_columns(pl.exclude("cycle").fill_nan(None)))


def read_batteryarchive(files: Sequence[Path]) -> list[Measurement]:
    """The time series of one cell's BatteryArchive ``*_timeseries.csv`` ``files`` (in
    order), every row of them in the frame (see the module's docstring)."""
    return read_in_turn(files, _read_file)
