"""Neware ``.ndax`` files (BTS 8 and later) and the older ``.nda`` files (BTS 7), read
by NewareNDA (``NewareNDA.read``).

NewareNDA tells the format by the suffix, exactly ``.ndax`` or ``.nda`` (lower case).

NewareNDA unpacks an ``.ndax`` file (a zip archive of ``.ndc`` record files), or walks
an ``.nda`` file's fixed-size records (versions 29 and 130; another version it refuses;
a record whose ``Index`` repeats an earlier one it drops), and hands back one row per
record, as BTSDA shows them: ``Index`` (the record number), ``Cycle``, ``Step_Index``
(the program's step), ``Step`` (counted up at every change of step), ``Status``
(``CC_Chg``, ``CCCV_DChg``, ``Rest``, ...), ``Time``, ``Voltage``, ``Current(mA)``,
capacities, energies, ``Timestamp`` and, where the cell had auxiliary channels, ``T<n>``
(temperature, degC) per channel. This module maps them:

- **cycle**: the cycle the instrument recorded (``software_cycle_number=False``; NewareNDA
  counts it from 1, windpipe from 0). The library's default regenerates the count from
  the step types ("charge first"), which is BTSDA's view, not the file's.
- **current**: ``Current(mA)`` / 1000. Neware records it signed, negative while
  discharging (NewareNDA passes the sign on: ``CC_DChg`` rows are negative), which is
  windpipe's convention: positive on charge.
- **time**: Neware's ``Time`` is the time since the *step* began, in ms (an ``.nda``
  file of version 130 records µs; windpipe keeps the ms: float32, below, no longer holds
  every µs past 8 s into a step). The test's time is the step's time plus the time of
  every earlier step up to its last record (Neware writes a record at each step's end,
  and the next step's first record at the same instant). NewareNDA hands ``Time`` over
  as float32, which holds the ms exactly in a step's first 8,192 s (2.3 h); it is
  rounded back to the ms. Later in a step the time has float32's 7 significant digits
  (within 5 ms a day into a step): the library's limit, which windpipe cannot undo.
- **temperature**: the auxiliary channel with the lowest number (``T1`` usually), where
  the file has one; **step**: ``Step``.

Every row NewareNDA returns is kept. A file that is no ``.ndax`` archive or ``.nda``
file, or one NewareNDA cannot decode, is an :class:`~services.ingest.base.IngestError`
naming it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from windpipe.services.ingest.base import IngestError, Measurement, failed, quiet
from windpipe.services.ingest.checks import import_reader

__all__ = ["elapsed_ms", "read_neware"]

_AUX_TEMPERATURE = re.compile(r"^T(?P<channel>\d+)$")


def elapsed_ms(step: np.ndarray, step_time_ms: np.ndarray) -> np.ndarray:
    """The test's time in ms of each record from its step (``Step``: a new number at
    every change of step) and its time since the step began: each step starts where the
    previous step's last record was."""
    changed = np.flatnonzero(np.diff(step) != 0) + 1
    ends = step_time_ms[changed - 1]  # the last record of each step before a change
    offset = np.zeros(len(step), dtype=np.int64)
    offset[changed] = ends
    return np.cumsum(offset) + step_time_ms


def _temperature(raw: Any) -> str | None:
    channels = [(int(m.group("channel")), c) for c in raw.columns
                if (m := _AUX_TEMPERATURE.match(str(c))) is not None]
    return min(channels)[1] if channels else None


def _frame(path: Path, raw: Any) -> pl.DataFrame:
    if raw.empty:
        raise IngestError(path, "holds no records")
    time = raw["Time"].to_numpy(dtype=np.float64)
    if not np.isfinite(time).all():
        row = int((~np.isfinite(time)).argmax())
        raise IngestError(path, f"time {time[row]!r} is not a finite number", row=row + 1,
                          column="Time", binary=True)
    step = raw["Step"].to_numpy(dtype=np.int64)
    total = elapsed_ms(step, np.rint(time * 1000.0).astype(np.int64))
    cols: dict[str, np.ndarray] = {
        "cycle": raw["Cycle"].to_numpy(dtype=np.int64) - 1,
        "test_time_s": total / 1000.0,
        "current_a": raw["Current(mA)"].to_numpy(dtype=np.float64) / 1000.0,
        "voltage_v": raw["Voltage"].to_numpy(dtype=np.float64),
        "step": step,
    }
    if (column := _temperature(raw)) is not None:
        cols["temperature_c"] = raw[column].to_numpy(dtype=np.float64)
    frame = pl.DataFrame(cols)
    return frame.with_columns(pl.col("current_a", "voltage_v").fill_nan(None))


def read_neware(files: Sequence[Path]) -> list[Measurement]:
    """The time series of Neware ``.ndax`` and ``.nda`` files, one measurement per file (see the
    module's docstring for the columns)."""
    module = import_reader("NewareNDA")
    out: list[Measurement] = []
    for path in files:
        try:
            raw = quiet(functools.partial(module.read, str(path), software_cycle_number=False,
                                          log_level="WARNING"))
        except Exception as exc:
            raise failed(path, "NewareNDA", exc) from exc
        out.append(Measurement(None, _frame(path, raw), (path.name,)))
    return out
