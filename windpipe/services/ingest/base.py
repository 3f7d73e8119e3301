"""What every cycler reader shares: the error naming a file and row, the measurements a
reader hands back, and the normalized columns and units (as ``windpipe.services.synth`` writes).

A reader turns one cell's export files into :class:`Measurement` frames in physical
units with the cycler's cycle index: ``TIME_SERIES`` columns (``cycle``,
``test_time_s``, ``current_a``, ``voltage_v``, optional ``temperature_c`` and ``step``,
the cycler's step index, which only tells where a step changes) or ``SPECTRUM`` columns
(``cycle``, ``freq_hz``, ``z_real_ohm``, ``z_imag_ohm``). Current is positive on
charge; ``z_imag_ohm`` is Im(Z) (negative for a capacitive arc). A reader that leaves a
row of the file out says how many and why (:attr:`Measurement.dropped`), so the summary
accounts for every row.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

__all__ = [
    "SPECTRUM",
    "TIME_SERIES",
    "UNITS",
    "IngestError",
    "Measurement",
    "failed",
    "quiet",
]

TIME_SERIES: tuple[str, ...] = ("cycle", "test_time_s", "current_a", "voltage_v",
                                "temperature_c", "step")
SPECTRUM: tuple[str, ...] = ("cycle", "freq_hz", "z_real_ohm", "z_imag_ohm")
UNITS: dict[str, str] = {
    "time_s": "s (since the cycle's first row)", "dt_s": "s (since the previous row)",
    "current_a": "A (positive on charge)", "voltage_v": "V", "temperature_c": "degC",
    "freq_hz": "Hz", "z_real_ohm": "ohm", "z_imag_ohm": "ohm (Im Z)",
}


class IngestError(ValueError):
    """A cycler export that cannot be ingested: names the file, and the row and column
    where one is to blame (``row``: the 1-based data row after the header, blank lines not
    counted; in a ``binary`` file the 1-based record). ``reason`` is the message without
    the file's name (what a skipped file's summary says)."""

    def __init__(self, file: Path | str, problem: str, *, row: int | None = None,
                 column: str | None = None, binary: bool = False) -> None:
        self.file = str(file)
        self.problem = problem
        self.row = row
        self.column = column
        where = "" if row is None else f"{'record' if binary else 'data row'} {row}"
        where += "" if column is None else f"{', ' if where else ''}column {column!r}"
        self.reason = f"{where}: {problem}" if where else problem
        super().__init__(f"{self.file}{', ' if where else ''}{where}: {problem}")


@dataclass(frozen=True)
class Measurement:
    """One kind of measurement read from a cell's files: ``protocol`` is ``None`` for a
    time series (the caller's protocol, ``cycling`` by default), ``"ocv"`` for an
    open-circuit record or ``"eis"`` for spectra; ``frame`` holds :data:`TIME_SERIES` or
    :data:`SPECTRUM` columns; ``current_from`` names the column the current was taken or
    derived from, where the reader says (``ingest.json`` lists it per file).

    ``file_rows``: the data rows of ``files`` this measurement stands for, in the frame
    or dropped (``None``: the frame holds every row the reader read); ``dropped``: the
    rows left out, by reason. The writer checks that they add up, so a reader cannot
    lose a row without saying why."""

    protocol: str | None
    frame: pl.DataFrame
    files: tuple[str, ...]
    current_from: str | None = None
    file_rows: int | None = None
    dropped: Mapping[str, int] = field(default_factory=dict)


def quiet(call: Callable[[], Any]) -> Any:
    """A library call without its deprecation noise (its internals, not the user's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return call()


def failed(path: Path, library: str, exc: Exception) -> IngestError:
    """A library's refusal of ``path`` as an :class:`IngestError` (its reason on one line)."""
    text = " ".join(str(exc).split())
    return IngestError(path, f"{library} could not read it: {type(exc).__name__}: {text}")
