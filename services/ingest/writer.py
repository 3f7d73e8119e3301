"""``ingest_exports``: cycler exports to normalized segments and a manifest.

One segment per cell, cycle and protocol, at
``segments/{set_id}/{cell_id}/{protocol}/cycle_{cidx:05d}.parquet`` under the output
folder, with ``manifest.parquet`` (identity, ``segment_path``, ``row_count`` and the
metadata ``cycler`` and ``source_files``) and ``ingest.json`` (what was read, by which
library, the units). A time-series segment holds ``time_s`` (float64, seconds since the
cycle's first row), ``dt_s``, ``current_a`` (positive on charge), ``voltage_v`` and
``temperature_c`` where the export has it (float32); a spectrum (``eis``) holds
``freq_hz``, ``z_real_ohm``, ``z_imag_ohm`` (Im Z). Missing values are nulls.

Every file is read and checked before the output folder changes: segments are written
to a hidden folder inside it and moved into place at the end, so a bad file leaves the
folder as it was.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata as dist_metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from services.ingest.base import UNITS, IngestError, Measurement
from services.ingest.readers import READERS, cell_of, detect_cycler, read_cell

__all__ = ["PATTERN", "IngestResult", "ingest_exports"]

PATTERN = "segments/{set_id}/{cell_id}/{protocol}/cycle_{cidx}.parquet"
_OUTPUTS = ("segments", "manifest.parquet", "ingest.json")
_TMP = ".windpipe-ingest"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, slots=True)
class IngestResult:
    """Where the normalized dataset went and what it holds."""

    path: Path
    manifest_path: Path
    n_cells: int
    n_segments: int
    n_rows: int
    files: tuple[str, ...]
    pattern: str = PATTERN


def _inputs(inputs: Sequence[Path | str], cycler: str) -> list[tuple[Path, str]]:
    """Every export file to read, with its cycler: files as given (refused when no reader
    takes them), directories walked (files no reader takes are skipped)."""
    found: list[tuple[Path, str]] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                if any(part.startswith(".") for part in child.relative_to(path).parts):
                    continue
                kind = detect_cycler(child) if cycler == "auto" else cycler
                if kind is not None:
                    found.append((child, kind))
        elif path.is_file():
            kind = detect_cycler(path) if cycler == "auto" else cycler
            if kind is None:
                raise IngestError(path, "no reader recognizes this file; name the cycler "
                                        f"(one of {sorted(READERS)})")
            found.append((path, kind))
        else:
            raise IngestError(path, "does not exist")
    if not found:
        raise IngestError(", ".join(str(i) for i in inputs) or "(no input)",
                          "holds no cycler export windpipe reads (.csv, .NNN, .mpr)")
    return found


def _segments(measure: Measurement, protocol: str) -> list[tuple[int, str, pa.Table]]:
    """A measurement's segments: (cidx, protocol, table), one per cycle, in cycle order."""
    frame = measure.frame
    kind = measure.protocol or protocol
    out = []
    for (cidx,), part in frame.group_by(["cycle"], maintain_order=True):
        cols: dict[str, pa.Array] = {}
        if measure.protocol == "eis":
            for name in ("freq_hz", "z_real_ohm", "z_imag_ohm"):
                cols[name] = pa.array(part.get_column(name).to_numpy().astype(np.float32),
                                      from_pandas=True)
        else:
            t = part.get_column("test_time_s").to_numpy().astype(np.float64)
            cols["time_s"] = pa.array(t - t[0])
            cols["dt_s"] = pa.array(np.diff(t, prepend=t[0]).astype(np.float32))
            for name in ("current_a", "voltage_v", "temperature_c"):
                if name in part.columns:
                    values = part.get_column(name).cast(float).to_numpy()
                    cols[name] = pa.array(values.astype(np.float32), from_pandas=True)
        out.append((int(cidx), kind, pa.table(cols)))
    out.sort(key=lambda item: item[0])
    return out


def _prepare(out: Path, *, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise IngestError(out, "the output is a file, not a folder")
    present = [p.name for p in out.iterdir()] if out.exists() else []
    if [p for p in present if p != _TMP] and not overwrite:
        raise IngestError(out, f"the output folder is not empty ({sorted(present)[:5]}); "
                               "pass overwrite (--overwrite) to replace what an earlier "
                               "ingest wrote there")
    out.mkdir(parents=True, exist_ok=True)


def _versions() -> dict[str, str]:
    found = {}
    for dist in ("battery-data-toolkit", "galvani", "pandas"):
        try:
            found[dist] = dist_metadata.version(dist)
        except dist_metadata.PackageNotFoundError:
            continue
    return found


def ingest_exports(
    inputs: Sequence[Path | str], out_dir: Path | str, *, cycler: str = "auto",
    set_id: str | None = None, protocol: str = "cycling", cell_pattern: str | None = None,
    overwrite: bool = False, row_group_rows: int = 65536,
) -> IngestResult:
    """Read the cycler exports ``inputs`` (files or folders) and write the normalized
    dataset under ``out_dir``.

    ``cycler``: ``auto`` (from each file's name and header) or one of :data:`READERS`;
    ``set_id`` (default: ``out_dir``'s name); ``protocol``: the time series' protocol
    (spectra are ``eis``); ``cell_pattern``: a regular expression whose group ``cell``
    (else its first group) in a file's name is its cell (default: the name without its
    suffix); files of one cell are one test (MACCOR ``.001``, ``.002``, ... in order).
    Raises :class:`IngestError` naming the file (and row) at fault; nothing is written then.
    """
    out = Path(out_dir).resolve()
    set_id = set_id or out.name
    for what, value in (("set_id", set_id), ("protocol", protocol)):
        if not _NAME.match(value):
            raise IngestError(out, f"{what} {value!r}: use letters, digits, '.', '_', '-'")
    if protocol != protocol.lower():
        raise IngestError(out, f"protocol {protocol!r}: protocol names are lower-case")
    if cycler != "auto" and cycler not in READERS:
        raise IngestError(out, f"unknown cycler {cycler!r}; one of {sorted(READERS)} or auto")
    regex = re.compile(cell_pattern) if cell_pattern else None
    cells: dict[tuple[str, str], list[Path]] = {}
    for path, kind in _inputs(inputs, cycler):
        cells.setdefault((cell_of(path, kind, regex), kind), []).append(path)
    _prepare(out, overwrite=overwrite)
    tmp = out / _TMP
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        rows: list[dict[str, Any]] = []
        owner: dict[tuple[str, int, str], str] = {}
        for (cell, kind), group in sorted(cells.items()):
            for measure in read_cell(kind, group):
                for cidx, proto, table in _segments(measure, protocol):
                    key = (cell, cidx, proto)
                    if key in owner:
                        raise IngestError(group[0], f"cell {cell!r} has {proto} cycle {cidx} in "
                                                    f"{owner[key]} too; give the files of one "
                                                    "cell one test, or separate cells")
                    owner[key] = ", ".join(measure.files)
                    rel = f"segments/{set_id}/{cell}/{proto}/cycle_{cidx:05d}.parquet"
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    pq.write_table(table, tmp / rel, row_group_size=row_group_rows,
                                   use_dictionary=False)
                    rows.append({"set_id": set_id, "cell_id": cell, "cidx": cidx,
                                 "protocol": proto, "segment_path": rel,
                                 "row_count": table.num_rows, "cycler": kind,
                                 "source_files": owner[key]})
        rows.sort(key=lambda r: (r["cell_id"], r["cidx"], r["protocol"]))
        pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([
            ("set_id", pa.string()), ("cell_id", pa.string()), ("cidx", pa.int64()),
            ("protocol", pa.string()), ("segment_path", pa.string()), ("row_count", pa.int64()),
            ("cycler", pa.string()), ("source_files", pa.string())])), tmp / "manifest.parquet")
        files = tuple(sorted(str(p) for group in cells.values() for p in group))
        info: dict[str, Any] = {
            "generator": "windpipe ingest", "set_id": set_id, "files": list(files),
            "cells": dict(sorted(cells)),
            "readers": {kind: READERS[kind].library for _cell, kind in cells},
            "library_versions": _versions(), "units": UNITS,
            "sign_convention": "current positive on charge", "manifest": "manifest.parquet",
            "pattern": PATTERN, "n_segments": len(rows),
            "n_rows": sum(r["row_count"] for r in rows),
        }
        (tmp / "ingest.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        for name in _OUTPUTS:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            (tmp / name).rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return IngestResult(out, out / "manifest.parquet", n_cells=len({c for c, _k in cells}),
                        n_segments=len(rows), n_rows=int(info["n_rows"]), files=files)
