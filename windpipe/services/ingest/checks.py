"""The columns a CSV reader relies on, checked before the reader runs, so that a bad
value is named by file, row and column instead of surfacing as a library's traceback.

Each layout says how the reader opens the file (the same ``pandas.read_csv`` options
battery-data-toolkit uses) and what each column it reads must hold: ``cycle`` (an
integer, never empty), ``time`` (a finite number, never empty) or ``value`` (a number,
or empty for a missing value). ``optional`` columns are read, and checked, where the
file has them. Rows are counted from 1 after the header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

from windpipe.services.contract.extras import install_hint
from windpipe.services.ingest.base import IngestError

__all__ = ["LAYOUTS", "CsvLayout", "check_csv", "import_reader"]

Kind = Literal["cycle", "time", "value"]


@dataclass(frozen=True)
class CsvLayout:
    """How a reader opens a CSV export and what it needs of its columns."""

    name: str
    columns: dict[str, Kind]
    options: dict[str, Any] = field(default_factory=dict)
    optional: dict[str, Kind] = field(default_factory=dict)


LAYOUTS: dict[str, CsvLayout] = {
    "arbin": CsvLayout("Arbin CSV", {
        "Test_Time": "time", "Cycle_Index": "cycle", "Current": "value", "Voltage": "value"},
        optional={"Step_Index": "cycle", "Temperature": "value"}),
    "maccor": CsvLayout("MACCOR ASCII", {
        "Cyc#": "cycle", "Test (Min)": "time", "Amps": "value", "Volts": "value"},
        {"skiprows": 1, "sep": "\t", "index_col": False, "encoding": "ISO-8859-1"}),
    "batterydata": CsvLayout("batterydata.energy.gov CSV", {
        "Cycle_Index": "cycle", "Step": "cycle", "Time_s": "time", "Current_A": "value",
        "Voltage_V": "value", "Cell_Temperature_C": "value", "Datenum_d": "time"}),
}


def import_reader(module: str) -> Any:
    """A reader library's module, or an :class:`ImportError` saying how to install it."""
    try:
        return import_module(module)
    except ImportError as exc:
        msg = (f"reading cycler exports needs {module.split('.', maxsplit=1)[0]}: "
               f"{install_hint('ingest')}")
        raise ImportError(msg) from exc


def check_csv(path: Path, layout: CsvLayout) -> int:
    """Check ``path``'s columns for ``layout``; return its number of data rows. Raises
    :class:`IngestError` naming the file, and the row and column of the first bad value."""
    pd = import_reader("pandas")
    try:
        header = pd.read_csv(path, nrows=0, **layout.options)
        missing = [c for c in layout.columns if c not in header.columns]
        if missing:
            raise IngestError(path, f"lacks the columns {missing} that the {layout.name} reader "
                                    f"needs (it has {list(header.columns)})")
        columns = dict(layout.columns)
        columns.update((c, k) for c, k in layout.optional.items() if c in header.columns)
        raw = pd.read_csv(path, usecols=list(columns), dtype=str, **layout.options)
    except IngestError:
        raise
    except Exception as exc:  # pandas' parser errors name the line
        raise IngestError(path, f"cannot be read as {layout.name}: {type(exc).__name__}: "
                                f"{exc}") from exc
    for column, kind in columns.items():
        text = raw[column]
        values = pd.to_numeric(text, errors="coerce")
        empty = text.isna()
        if kind != "value" and bool(empty.any()):
            row = int(empty.to_numpy().argmax())
            raise IngestError(path, f"is empty; the {kind} column needs a value in every row",
                              row=row + 1, column=column)
        bad = values.isna() & ~empty
        if kind == "cycle":
            bad |= ~empty & values.notna() & (values != values.round())
        elif kind == "time":
            bad |= ~empty & values.notna() & ~values.map(math.isfinite).astype(bool)
        if bool(bad.any()):
            row = int(bad.to_numpy().argmax())
            want = {"cycle": "an integer", "time": "a finite number", "value": "a number"}[kind]
            raise IngestError(path, f"{text.iloc[row]!r} is not {want}", row=row + 1,
                              column=column)
    return len(raw)
