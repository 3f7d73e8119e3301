"""The cycler readers: maintained libraries of the field, not parsers of our own.

- ``arbin``: Arbin CSV (``Data_Point, Test_Time, ..., Cycle_Index, Current, Voltage,
  ...``), pandas in battery-data-toolkit's column mapping (:mod:`windpipe.services.ingest.arbin`:
  battdat's ``ArbinReader`` rounds the time to whole seconds and drops rows).
- ``arbin_res``: Arbin ``.res`` (MITS Pro's Access database), galvani's ``res2sqlite``
  through mdbtools' ``mdb-export`` (:mod:`windpipe.services.ingest.arbin_res`: its
  ``Channel_Normal_Table`` in the Arbin CSV reader's mapping).
- ``maccor``: MACCOR ASCII (``name.001``, ``name.002``, ...: one test),
  battery-data-toolkit; the rows its ``drop_cycles`` leaves out (a time to 0.01 s,
  voltage and current that an earlier row of the file has) are counted.
- ``batterydata``: batterydata.energy.gov ``<cell>-raw.csv`` (time series and EIS rows),
  battery-data-toolkit.
- ``biologic``: BioLogic EC-Lab ``.mpr`` (GCPL and the like, OCV; PEIS/GEIS spectra),
  galvani (:mod:`windpipe.services.ingest.biologic`: where the current comes from when a file
  has no ``I/mA`` column).
- ``neware``: Neware ``.ndax`` and the older ``.nda``, NewareNDA
  (:mod:`windpipe.services.ingest.neware`: the test's time from Neware's step time, the
  recorded cycle, the sign as recorded).
- ``batteryarchive``: batteryarchive.org ``<cell>_timeseries.csv``, pandas in
  battery-data-toolkit's column mapping (:mod:`windpipe.services.ingest.batteryarchive`:
  battery-data-toolkit 0.4 only writes BatteryArchive's tables).

The libraries are the optional extra ``windpipe[ingest]`` and are imported when a file
is read. A CSV export's columns are checked first (:mod:`windpipe.services.ingest.checks`), so a
bad value is named by file, row and column; what a library still refuses is an
:class:`~services.ingest.base.IngestError` naming the file and the library's reason.
Every reader says how many rows of its files it read and which it left out, and why
(:class:`~services.ingest.base.Measurement`), for the summary.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from windpipe.services.ingest.arbin import read_arbin
from windpipe.services.ingest.arbin_res import read_arbin_res
from windpipe.services.ingest.base import IngestError, Measurement, failed, quiet
from windpipe.services.ingest.batteryarchive import read_batteryarchive
from windpipe.services.ingest.biologic import read_biologic, technique_of
from windpipe.services.ingest.checks import LAYOUTS, check_csv, import_reader
from windpipe.services.ingest.neware import read_neware

__all__ = ["READERS", "Reader", "cell_of", "detect_cycler", "read_cell"]

_MACCOR = re.compile(r"^(?P<cell>.+)\.(?P<part>\d{3})$")
_BATTERYDATA = re.compile(r"^(?P<cell>[-\w]+)[- ](?P<kind>summary|raw)\.csv$")
_BATTERYARCHIVE = re.compile(r"^(?P<cell>.+)_timeseries\.csv$", re.IGNORECASE)
_BA_HEADER = {"Test_Time (s)", "Cycle_Index", "Current (A)", "Voltage (V)"}
_DROP_CYCLES = ("same time (to 0.01 s), voltage and current as an earlier row of the file "
                "(battery-data-toolkit's drop_cycles)")


def detect_cycler(path: Path) -> str | None:
    """The cycler that wrote ``path``, from its name and (CSV) its header; ``None`` when
    it is no export windpipe reads (``-summary.csv`` files of batterydata.energy.gov and
    BatteryArchive's ``_cycle_data.csv`` too: the time series holds the measurements)."""
    name = path.name
    if name.lower().endswith(".mpr"):
        return "biologic"
    if name.endswith((".ndax", ".nda")):  # NewareNDA knows the formats by these suffixes only
        return "neware"
    if name.lower().endswith(".res"):
        return "arbin_res"
    if _MACCOR.match(name):
        return "maccor"
    if not name.lower().endswith(".csv"):
        return None
    if (m := _BATTERYDATA.match(name)) is not None:
        return "batterydata" if m.group("kind") == "raw" else None
    with path.open(encoding="utf-8", errors="replace") as handle:
        header = {c.strip() for c in handle.readline().split(",")}
    if header >= _BA_HEADER:
        return "batteryarchive"
    if {"Cycle_Index", "Current", "Voltage"} <= header and header & {"Test_Time", "DateTime"}:
        return "arbin"  # one without Test_Time is refused, saying it lacks it
    return None


def cell_of(path: Path, cycler: str, cell_regex: re.Pattern[str] | None) -> str:
    """The cell a file belongs to: ``cell_regex``'s group ``cell`` (else its first group,
    else its match) in the file name, or the file's name without the cycler's suffix."""
    name = path.name
    if cell_regex is not None:
        m = cell_regex.search(name)
        if m is None:
            raise IngestError(path, f"the cell pattern {cell_regex.pattern!r} does not match "
                                    "its name")
        cell = m.group("cell") if "cell" in cell_regex.groupindex else (
            m.group(1) if cell_regex.groups else m.group(0))
    elif cycler == "maccor" and (mm := _MACCOR.match(name)) is not None:
        cell = mm.group("cell")
    elif cycler == "batterydata" and (mb := _BATTERYDATA.match(name)) is not None:
        cell = mb.group("cell")
    elif cycler == "batteryarchive" and (ma := _BATTERYARCHIVE.match(name)) is not None:
        cell = ma.group("cell")
    else:
        cell = path.stem
    if not cell or cell.startswith(".") or any(ord(c) < 32 for c in cell):
        raise IngestError(path, f"{cell!r} cannot name a cell (empty, hidden or with control "
                                "characters); pass a cell pattern")
    return cell


def _time_series(raw: Any, *, temperature: bool) -> pl.DataFrame:
    """battdat's ``raw_data`` (pandas) as our time-series columns."""
    cols = {"cycle_number": "cycle", "test_time": "test_time_s", "current": "current_a",
            "voltage": "voltage_v"}
    if temperature and "temperature" in raw.columns:
        cols["temperature"] = "temperature_c"
    frame = pl.from_pandas(raw[list(cols)].reset_index(drop=True)).rename(cols)
    return frame.with_columns(pl.col("cycle").cast(pl.Int64),
                              pl.exclude("cycle").cast(pl.Float64))


def _read_battdat(cycler: str, files: Sequence[Path]) -> list[Measurement]:
    rows = sum(check_csv(path, LAYOUTS[cycler]) for path in files)
    names = tuple(p.name for p in files)
    if cycler == "batterydata":
        module = import_reader("battdat.io.batterydata")
        try:
            data = quiet(lambda: module.BDReader(store_all=True).read_dataset(
                [str(p) for p in files]))
        except Exception as exc:
            raise failed(files[0], "battery-data-toolkit", exc) from exc
        raw = data.tables["raw_data"]
        eis = data.tables.get("eis_data")
        n_eis = 0 if eis is None else len(eis)
        out = [Measurement(None, _time_series(raw[raw["Frequency_Hz"].isna()]
                                              if "Frequency_Hz" in raw.columns else raw,
                                              temperature=True), names,
                           file_rows=rows - n_eis)]
        if eis is not None and n_eis:
            frame = pl.from_pandas(eis[["test_id", "frequency", "z_real", "z_imag"]]
                                   .reset_index(drop=True))
            out.append(Measurement("eis", frame.select(
                (pl.col("test_id").cast(pl.Int64) - 1).alias("cycle"),
                pl.col("frequency").cast(pl.Float64).alias("freq_hz"),
                pl.col("z_real").cast(pl.Float64).alias("z_real_ohm"),
                pl.col("z_imag").cast(pl.Float64).alias("z_imag_ohm")), names,
                file_rows=n_eis))
        return out
    module = import_reader("battdat.io.maccor")
    try:
        data = quiet(lambda: module.MACCORReader().read_dataset([str(p) for p in files]))
    except Exception as exc:
        raise failed(files[0], "battery-data-toolkit", exc) from exc
    frame = _time_series(data.tables["raw_data"], temperature=True)
    gone = rows - frame.height
    return [Measurement(None, frame, names, file_rows=rows,
                        dropped={_DROP_CYCLES: gone} if gone else {})]


def read_cell(cycler: str, files: Sequence[Path]) -> list[Measurement]:
    """The measurements of one cell's ``files`` (one test: MACCOR continuation files in
    order) read by ``cycler``'s library."""
    if cycler not in READERS:
        raise IngestError(files[0], f"unknown cycler {cycler!r}; windpipe reads {sorted(READERS)}")
    return READERS[cycler].read(files)


def _no_sequence(_path: Path) -> int | None:
    return None


def _technique_number(path: Path) -> int | None:
    technique = technique_of(path)
    return None if technique is None else technique.number


@dataclass(frozen=True)
class Reader:
    """How one cycler's exports are read: ``library`` names the library and the format
    (in ``ingest.json``), ``read`` turns one cell's files into measurements.

    ``per_file``: each file is read, and taken or skipped, on its own (else a cell's
    files are one test, read together: MACCOR ``.001``, ``.002``). ``sequence``: a file's
    number in its experiment, where its cycle count restarts (EC-Lab's technique files);
    the writer continues a cell's cycles across such files in that order."""

    library: str
    read: Callable[[Sequence[Path]], list[Measurement]]
    per_file: bool = False
    sequence: Callable[[Path], int | None] = _no_sequence


READERS: dict[str, Reader] = {
    "arbin": Reader("pandas (read_csv, in battery-data-toolkit's ArbinReader column mapping; "
                    "time from Test_Time), Arbin CSV", read_arbin),
    "arbin_res": Reader("galvani (galvani.res2sqlite, mdbtools' mdb-export; "
                        "Channel_Normal_Table in the Arbin CSV mapping), Arbin .res",
                        read_arbin_res),
    "maccor": Reader("battery-data-toolkit (battdat.io.maccor.MACCORReader), MACCOR ASCII "
                     ".NNN", lambda files: _read_battdat("maccor", files)),
    "batterydata": Reader("battery-data-toolkit (battdat.io.batterydata.BDReader), "
                          "batterydata.energy.gov <cell>-raw.csv",
                          lambda files: _read_battdat("batterydata", files)),
    "biologic": Reader("galvani (galvani.BioLogic.MPRfile), BioLogic EC-Lab .mpr",
                       read_biologic, per_file=True, sequence=_technique_number),
    "neware": Reader("NewareNDA (NewareNDA.read), Neware .ndax and .nda",
                     read_neware, per_file=True),
    "batteryarchive": Reader("pandas (read_csv, in battery-data-toolkit's BatteryArchive "
                             "column mapping), BatteryArchive <cell>_timeseries.csv",
                             read_batteryarchive),
}
"""The cyclers ``windpipe ingest`` reads, by name: the one list (the CLI's ``--cycler``
choices and the writer's checks are its keys)."""
