"""What every cycler reader shares: the error naming a file and row, the measurements a
reader hands back, and the normalized columns and units (as ``services.synth`` writes).

A reader turns one cell's export files into :class:`Measurement` frames in physical
units with the cycler's cycle index: ``TIME_SERIES`` columns (``cycle``,
``test_time_s``, ``current_a``, ``voltage_v``, optional ``temperature_c``) or
``SPECTRUM`` columns (``cycle``, ``freq_hz``, ``z_real_ohm``, ``z_imag_ohm``). Current
is positive on charge; ``z_imag_ohm`` is Im(Z) (negative for a capacitive arc).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

__all__ = [
    "SPECTRUM",
    "TIME_SERIES",
    "UNITS",
    "IngestError",
    "Measurement",
]

TIME_SERIES: tuple[str, ...] = ("cycle", "test_time_s", "current_a", "voltage_v",
                                "temperature_c")
SPECTRUM: tuple[str, ...] = ("cycle", "freq_hz", "z_real_ohm", "z_imag_ohm")
UNITS: dict[str, str] = {
    "time_s": "s (since the cycle's first row)", "dt_s": "s (since the previous row)",
    "current_a": "A (positive on charge)", "voltage_v": "V", "temperature_c": "degC",
    "freq_hz": "Hz", "z_real_ohm": "ohm", "z_imag_ohm": "ohm (Im Z)",
}


class IngestError(ValueError):
    """A cycler export that cannot be ingested: names the file, and the row and column
    where one is to blame (``row``: the 1-based data row after the header, blank lines not
    counted; in a ``binary`` file the 1-based record)."""

    def __init__(self, file: Path | str, problem: str, *, row: int | None = None,
                 column: str | None = None, binary: bool = False) -> None:
        self.file = str(file)
        self.problem = problem
        self.row = row
        self.column = column
        where = "" if row is None else f", {'record' if binary else 'data row'} {row}"
        where += "" if column is None else f", column {column!r}"
        super().__init__(f"{self.file}{where}: {problem}")


@dataclass(frozen=True)
class Measurement:
    """One kind of measurement read from a cell's files: ``protocol`` is ``None`` for a
    time series (the caller's protocol, ``cycling`` by default) or ``"eis"`` for spectra;
    ``frame`` holds :data:`TIME_SERIES` or :data:`SPECTRUM` columns."""

    protocol: str | None
    frame: pl.DataFrame
    files: tuple[str, ...]
