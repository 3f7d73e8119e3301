"""The cycler readers: maintained libraries of the field, not parsers of our own.

- ``arbin``: Arbin CSV (``Data_Point, ..., DateTime, Cycle_Index, Current, Voltage,
  ...``), battery-data-toolkit.
- ``maccor``: MACCOR ASCII (``name.001``, ``name.002``, ...: one test),
  battery-data-toolkit.
- ``batterydata``: batterydata.energy.gov ``<cell>-raw.csv`` (time series and EIS rows),
  battery-data-toolkit.
- ``biologic``: BioLogic EC-Lab ``.mpr`` (GCPL and the like; PEIS/GEIS spectra), galvani.

The libraries are the optional extra ``windpipe[ingest]`` and are imported when a file
is read. A CSV export's columns are checked first (:mod:`services.ingest.checks`), so a
bad value is named by file, row and column; what a library still refuses is an
:class:`~services.ingest.base.IngestError` naming the file and the library's reason.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from services.ingest.base import IngestError, Measurement
from services.ingest.checks import LAYOUTS, check_csv, import_reader

__all__ = ["READERS", "Reader", "cell_of", "detect_cycler", "read_cell"]

_MACCOR = re.compile(r"^(?P<cell>.+)\.(?P<part>\d{3})$")
_BATTERYDATA = re.compile(r"^(?P<cell>[-\w]+)[- ](?P<kind>summary|raw)\.csv$")


def detect_cycler(path: Path) -> str | None:
    """The cycler that wrote ``path``, from its name and (CSV) its header; ``None`` when
    it is no export windpipe reads (``-summary.csv`` files of batterydata.energy.gov too:
    the raw file holds the measurements)."""
    name = path.name
    if name.lower().endswith(".mpr"):
        return "biologic"
    if _MACCOR.match(name):
        return "maccor"
    if not name.lower().endswith(".csv"):
        return None
    if (m := _BATTERYDATA.match(name)) is not None:
        return "batterydata" if m.group("kind") == "raw" else None
    with path.open(encoding="utf-8", errors="replace") as handle:
        header = {c.strip() for c in handle.readline().split(",")}
    if {"Cycle_Index", "DateTime", "Current", "Voltage"} <= header:
        return "arbin"
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
    else:
        cell = path.stem
    if not cell or cell.startswith(".") or any(ord(c) < 32 for c in cell):
        raise IngestError(path, f"{cell!r} cannot name a cell (empty, hidden or with control "
                                "characters); pass a cell pattern")
    return cell


def _quiet(call: Callable[[], Any]) -> Any:
    """A library call without its deprecation noise (its internals, not the user's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return call()


def _failed(path: Path, library: str, exc: Exception) -> IngestError:
    text = " ".join(str(exc).split())  # one line, whatever the library wrote
    return IngestError(path, f"{library} could not read it: {type(exc).__name__}: {text}")


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
    for path in files:
        check_csv(path, LAYOUTS[cycler])
    names = tuple(p.name for p in files)
    if cycler == "batterydata":
        module = import_reader("battdat.io.batterydata")
        try:
            data = _quiet(lambda: module.BDReader(store_all=True).read_dataset(
                [str(p) for p in files]))
        except Exception as exc:
            raise _failed(files[0], "battery-data-toolkit", exc) from exc
        raw = data.tables["raw_data"]
        out = [Measurement(None, _time_series(raw[raw["Frequency_Hz"].isna()]
                                              if "Frequency_Hz" in raw.columns else raw,
                                              temperature=True), names)]
        eis = data.tables.get("eis_data")
        if eis is not None and len(eis):
            frame = pl.from_pandas(eis[["test_id", "frequency", "z_real", "z_imag"]]
                                   .reset_index(drop=True))
            out.append(Measurement("eis", frame.select(
                (pl.col("test_id").cast(pl.Int64) - 1).alias("cycle"),
                pl.col("frequency").cast(pl.Float64).alias("freq_hz"),
                pl.col("z_real").cast(pl.Float64).alias("z_real_ohm"),
                pl.col("z_imag").cast(pl.Float64).alias("z_imag_ohm")), names))
        return out
    module = import_reader(f"battdat.io.{cycler}")
    reader = module.ArbinReader() if cycler == "arbin" else module.MACCORReader()
    try:
        data = _quiet(lambda: reader.read_dataset([str(p) for p in files]))
    except Exception as exc:
        raise _failed(files[0], "battery-data-toolkit", exc) from exc
    return [Measurement(None, _time_series(data.tables["raw_data"], temperature=True), names)]


def _column(data: Any, *names: str) -> np.ndarray | None:
    for name in names:
        if name in data.dtype.names:
            return np.asarray(data[name], dtype=np.float64)
    return None


def _read_biologic(files: Sequence[Path]) -> list[Measurement]:
    module = import_reader("galvani.BioLogic")
    out: list[Measurement] = []
    for path in files:
        try:
            with path.open("rb") as handle:
                data = _quiet(functools.partial(module.MPRfile, handle)).data.copy()
        except Exception as exc:
            raise _failed(path, "galvani", exc) from exc
        n = len(data)
        cycle = _column(data, "cycle number")
        if cycle is None and (half := _column(data, "half cycle")) is not None:
            cycle = np.floor(half / 2)
        cycle = np.zeros(n) if cycle is None else cycle
        bad = ~np.isfinite(cycle) | (cycle != np.round(cycle))
        if bad.any():
            raise IngestError(path, f"cycle number {cycle[bad.argmax()]!r} is not an integer",
                              row=int(bad.argmax()) + 1, column="cycle number", binary=True)
        freq = _column(data, "freq/Hz")
        if freq is not None:
            re_z, im_z = _column(data, "Re(Z)/Ohm"), _column(data, "-Im(Z)/Ohm")
            if re_z is None or im_z is None:
                raise IngestError(path, "an impedance file without Re(Z)/Ohm and -Im(Z)/Ohm")
            frame = pl.DataFrame({"cycle": cycle.astype(np.int64), "freq_hz": freq,
                                  "z_real_ohm": re_z, "z_imag_ohm": -im_z})
            out.append(Measurement("eis", frame, (path.name,)))
            continue
        time = _column(data, "time/s")
        current = _column(data, "I/mA", "<I>/mA")
        voltage = _column(data, "Ewe/V", "<Ewe>/V", "Ecell/V")
        if time is None or current is None or voltage is None:
            lacks = [n for n, v in (("time/s", time), ("I/mA", current), ("Ewe/V", voltage))
                     if v is None]
            raise IngestError(path, f"has no {lacks} column (it has {list(data.dtype.names)})")
        if not np.isfinite(time).all():
            row = int((~np.isfinite(time)).argmax())
            raise IngestError(path, f"time {time[row]!r} is not a finite number", row=row + 1,
                              column="time/s", binary=True)
        cols: dict[str, np.ndarray] = {"cycle": cycle.astype(np.int64), "test_time_s": time,
                                       "current_a": current / 1000.0, "voltage_v": voltage}
        if (temp := _column(data, "Temperature/°C")) is not None:
            cols["temperature_c"] = temp
        out.append(Measurement(None, pl.DataFrame(cols), (path.name,)))
    return out


def read_cell(cycler: str, files: Sequence[Path]) -> list[Measurement]:
    """The measurements of one cell's ``files`` (one test: MACCOR continuation files in
    order) read by ``cycler``'s library."""
    if cycler not in READERS:
        raise IngestError(files[0], f"unknown cycler {cycler!r}; windpipe reads {sorted(READERS)}")
    return READERS[cycler].read(files)


@dataclass(frozen=True)
class Reader:
    """How one cycler's exports are read: ``library`` names the library and the format
    (in ``ingest.json``), ``read`` turns one cell's files into measurements."""

    library: str
    read: Callable[[Sequence[Path]], list[Measurement]]


READERS: dict[str, Reader] = {
    "arbin": Reader("battery-data-toolkit (battdat.io.arbin.ArbinReader), Arbin CSV",
                    lambda files: _read_battdat("arbin", files)),
    "maccor": Reader("battery-data-toolkit (battdat.io.maccor.MACCORReader), MACCOR ASCII "
                     ".NNN", lambda files: _read_battdat("maccor", files)),
    "batterydata": Reader("battery-data-toolkit (battdat.io.batterydata.BDReader), "
                          "batterydata.energy.gov <cell>-raw.csv",
                          lambda files: _read_battdat("batterydata", files)),
    "biologic": Reader("galvani (galvani.BioLogic.MPRfile), BioLogic EC-Lab .mpr",
                       _read_biologic),
}
"""The cyclers ``windpipe ingest`` reads, by name: the one list (the CLI's ``--cycler``
choices and the writer's checks are its keys)."""
