"""BioLogic EC-Lab ``.mpr`` files, read by galvani (``galvani.BioLogic.MPRfile``).

galvani hands back the file's records as EC-Lab named its columns; this module picks
what a segment needs and says which protocol a file is:

- a spectrum (``freq/Hz``, ``Re(Z)/Ohm``, ``-Im(Z)/Ohm``: PEIS, GEIS) is ``eis``;
- an open-circuit record (EC-Lab's OCV technique writes ``time/s`` and ``Ewe/V`` only)
  is ``ocv``: the cell is disconnected, so its current is 0 A by definition;
- every other time series (GCPL, ModuloBat, CV, ...) is the caller's protocol.

**The current.** EC-Lab leaves ``I/mA`` out of many files (GCPL often records only the
charge), so the current comes from the first of these the file has:

1. ``I/mA``, the measured current;
2. the charge passed since the previous record, ``dq/mA.h`` (also ``dQ/mA.h``,
   ``dQ/C``), or the difference of the charge since the start, ``(Q-Qo)/mA.h``
   (``(Q-Qo)/C``): current = charge / the time since the previous record, the mean
   current over that interval (what navani does). Integrated over time it gives the
   file's charge back exactly. The file's first record has no interval, nor has one at
   the previous record's time: their current is missing (null).
   ``Q charge/discharge/mA.h`` is not used: it restarts every half cycle;
3. ``<I>/mA``, the current averaged over the recording interval;
4. a control column, ``control/mA`` or ``control/V/mA``, with the ``mode`` flag of
   each record: the set current in galvanostatic records (mode 1), 0 A at rest
   (mode 3); a potentiostatic record (mode 2) holds a voltage there, so such a file
   is refused.

A file with none of these is an open-circuit record (``ocv``) when its name says so
(``..._NN_OCV_C01.mpr``) or names no technique, and is refused otherwise.

**Numbered technique files.** EC-Lab writes each technique of an experiment to its own
file, ``<name>_<NN>_<technique>_C<channel>.mpr``: ``NN`` is the technique's place in the
sequence. :func:`technique_of` reads it, so the writer can keep the techniques of one
cell apart: their cycle counts restart in every file, so the writer counts a cell's
cycles on from one technique file to the next, in this order.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from windpipe.services.ingest.base import IngestError, Measurement, failed, quiet
from windpipe.services.ingest.checks import import_reader

__all__ = ["Technique", "current_ma", "read_biologic", "technique_of"]

_TECHNIQUE = re.compile(r"_(?P<number>\d{1,3})_(?P<name>[A-Za-z][A-Za-z0-9-]*?)"
                        r"(?:_C(?P<channel>\d+))?(?:_\d+)?\.mpr$", re.IGNORECASE)
_OPEN_CIRCUIT = {"OCV", "OCP"}
# (column, what it holds, mA*s per unit): a charge per record, or since the start
_CHARGES: tuple[tuple[str, str, float], ...] = (
    ("dq/mA.h", "delta", 3600.0), ("dQ/mA.h", "delta", 3600.0), ("dQ/C", "delta", 1000.0),
    ("(Q-Qo)/mA.h", "total", 3600.0), ("(Q-Qo)/C", "total", 1000.0),
)
_CONTROLS = ("control/mA", "control/V/mA")
_GALVANOSTATIC, _POTENTIOSTATIC, _REST = 1, 2, 3


@dataclass(frozen=True, slots=True)
class Technique:
    """An EC-Lab technique file's place in its experiment: ``number`` (``NN``) and
    ``name`` (``GCPL``, ``OCV``, ``PEIS``, ``MB``, ...), from the file's name."""

    number: int
    name: str


def technique_of(path: Path) -> Technique | None:
    """The technique an EC-Lab file name carries (``cell_03_GCPL_C01.mpr``: 3, GCPL),
    or ``None`` when the name has none."""
    m = _TECHNIQUE.search(path.name)
    return None if m is None else Technique(int(m.group("number")), m.group("name").upper())


def _column(data: Any, *names: str) -> np.ndarray | None:
    for name in names:
        if name in data.dtype.names:
            return np.asarray(data[name], dtype=np.float64)
    return None


def _from_charge(path: Path, data: Any, time: np.ndarray) -> tuple[np.ndarray, str] | None:
    for name, kind, scale in _CHARGES:
        charge = _column(data, name)
        if charge is None:
            continue
        delta = np.diff(charge, prepend=charge[:1]) if kind == "total" else charge.copy()
        dt = np.diff(time, prepend=time[:1])
        bad = (dt <= 0) & (delta != 0)
        bad[0] = False
        if bad.any():
            row = int(bad.argmax())
            raise IngestError(path, f"charge {delta[row]!r} passed in {dt[row]!r} s: no current "
                                    "can be derived", row=row + 1, column=name, binary=True)
        # no interval before the first record, nor before one at the previous one's time
        current = np.full(len(delta), np.nan)
        span = dt > 0
        current[span] = delta[span] * scale / dt[span]
        return current, name
    return None


def _from_control(path: Path, data: Any, mode: np.ndarray | None) -> tuple[np.ndarray, str] | None:
    name = next((c for c in _CONTROLS if c in data.dtype.names), None)
    if name is None:
        return None
    control = np.asarray(data[name], dtype=np.float64)
    if mode is None:
        if name == "control/mA":  # a galvanostatic technique: the set current throughout
            return control, name
        raise IngestError(path, f"{name!r} holds a current or a voltage by each record's mode, "
                                "and the file has no mode flag")
    if (potentiostatic := mode == _POTENTIOSTATIC).any():
        row = int(potentiostatic.argmax())
        raise IngestError(path, f"a potentiostatic record: {name!r} holds its voltage, and the "
                                "file records no current or charge", row=row + 1, column=name,
                          binary=True)
    return np.where(mode == _REST, 0.0, control), f"{name} (mode)"


def current_ma(path: Path, data: Any, *, mode: np.ndarray | None = None
               ) -> tuple[np.ndarray, str] | None:
    """The current in mA of each record of galvani's ``data`` and the column it came
    from (``mode``: the records' mode flag, where the file has one), or ``None`` when the
    file records neither current, charge nor control (an open-circuit record). NaN where
    it cannot be known (the first record of a current derived from a charge)."""
    if (measured := _column(data, "I/mA")) is not None:
        return measured, "I/mA"
    time = _column(data, "time/s")
    if time is not None and (derived := _from_charge(path, data, time)) is not None:
        return derived
    if (averaged := _column(data, "<I>/mA")) is not None:
        return averaged, "<I>/mA"
    return _from_control(path, data, mode)


def _cycles(path: Path, data: Any) -> np.ndarray:
    cycle = _column(data, "cycle number")
    if cycle is None and (half := _column(data, "half cycle")) is not None:
        cycle = np.floor(half / 2)
    cycle = np.zeros(len(data)) if cycle is None else cycle
    bad = ~np.isfinite(cycle) | (cycle != np.round(cycle))
    if bad.any():
        raise IngestError(path, f"cycle number {cycle[bad.argmax()]!r} is not an integer",
                          row=int(bad.argmax()) + 1, column="cycle number", binary=True)
    return cycle.astype(np.int64)


def _spectrum(path: Path, data: Any, cycle: np.ndarray, freq: np.ndarray) -> Measurement:
    re_z, im_z = _column(data, "Re(Z)/Ohm"), _column(data, "-Im(Z)/Ohm")
    if re_z is None or im_z is None:
        raise IngestError(path, "an impedance file without Re(Z)/Ohm and -Im(Z)/Ohm")
    frame = pl.DataFrame({"cycle": cycle, "freq_hz": freq, "z_real_ohm": re_z,
                          "z_imag_ohm": -im_z})
    return Measurement("eis", frame, (path.name,))


def _time_series(path: Path, mpr: Any, data: Any, cycle: np.ndarray) -> Measurement:
    time = _column(data, "time/s")
    voltage = _column(data, "Ewe/V", "<Ewe>/V", "Ecell/V")
    if time is None or voltage is None:
        lacks = [n for n, v in (("time/s", time), ("Ewe/V", voltage)) if v is None]
        raise IngestError(path, f"has no {lacks} column (it has {list(data.dtype.names)})")
    if not np.isfinite(time).all():
        row = int((~np.isfinite(time)).argmax())
        raise IngestError(path, f"time {time[row]!r} is not a finite number", row=row + 1,
                          column="time/s", binary=True)
    mode = None
    if "mode" in getattr(mpr, "flags_dict", {}):
        mode = np.asarray(mpr.get_flag("mode"), dtype=np.int64)
    found = current_ma(path, data, mode=mode)
    technique = technique_of(path)
    protocol = None
    if technique is not None and technique.name in _OPEN_CIRCUIT:
        protocol = "ocv"
    if found is None:
        if technique is not None and protocol is None:
            raise IngestError(path, f"a {technique.name} file without a current: no I/mA, "
                                    "charge (dq/mA.h, (Q-Qo)/mA.h) or control column (it has "
                                    f"{list(data.dtype.names)})")
        protocol = "ocv"
        found = (np.zeros(len(data)), "open circuit")
    cols: dict[str, np.ndarray] = {"cycle": cycle, "test_time_s": time,
                                   "current_a": found[0] / 1000.0, "voltage_v": voltage}
    if (temp := _column(data, "Temperature/°C")) is not None:
        cols["temperature_c"] = temp
    frame = pl.DataFrame(cols).with_columns(pl.col("current_a").fill_nan(None))
    return Measurement(protocol, frame, (path.name,), current_from=found[1])


def read_biologic(files: Sequence[Path]) -> list[Measurement]:
    """The measurements of EC-Lab ``.mpr`` files, one per file (see the module's
    docstring for the protocol and the current)."""
    module = import_reader("galvani.BioLogic")
    out: list[Measurement] = []
    for path in files:
        try:
            with path.open("rb") as handle:
                mpr = quiet(functools.partial(module.MPRfile, handle))
                data = mpr.data.copy()
        except Exception as exc:
            raise failed(path, "galvani", exc) from exc
        cycle = _cycles(path, data)
        freq = _column(data, "freq/Hz")
        out.append(_spectrum(path, data, cycle, freq) if freq is not None
                   else _time_series(path, mpr, data, cycle))
    return out
