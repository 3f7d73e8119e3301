"""``ingest_exports``: cycler exports to normalized segments and a manifest.

One segment per cell, cycle and protocol, at
``segments/{set_id}/{cell_id}/{protocol}/cycle_{cidx:05d}.parquet`` under the output
folder, with ``manifest.parquet`` (identity, ``segment_path``, ``row_count`` and the
metadata ``cycler`` and ``source_files``) and ``ingest.json`` (what was read, by which
library, where a current was derived from, the units, the files skipped and why). A
time-series segment (the caller's protocol, or ``ocv``) holds ``time_s`` (float64,
seconds since the cycle's first row), ``dt_s``, ``current_a`` (positive on charge),
``voltage_v`` and ``temperature_c`` where the export has it (float32); a spectrum
(``eis``) holds ``freq_hz``, ``z_real_ohm``, ``z_imag_ohm`` (Im Z). Missing values are
nulls.

Every file is read and checked before the output folder changes: segments are written
to a hidden folder inside it and moved into place at the end, so a bad file leaves the
folder as it was (``on_bad_file="stop"``). With ``"skip"`` a file (or a MACCOR test's
files, read together) is read and checked whole before any of its segments is written,
so what cannot be taken leaves nothing behind.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata as dist_metadata
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from windpipe.services.ingest.accounting import FileRows, account
from windpipe.services.ingest.base import UNITS, IngestError, Measurement
from windpipe.services.ingest.readers import READERS, cell_of, detect_cycler, read_cell

__all__ = ["PATTERN", "IngestResult", "OnBadFile", "Skipped", "ingest_exports"]

PATTERN = "segments/{set_id}/{cell_id}/{protocol}/cycle_{cidx}.parquet"
_OUTPUTS = ("segments", "manifest.parquet", "ingest.json")
_TMP = ".windpipe-ingest"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

OnBadFile = Literal["stop", "skip"]
"""What ``ingest_exports`` does with a file it cannot take: ``stop`` (raise; the
default) or ``skip`` (leave it out, and say so)."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file left out with ``on_bad_file="skip"``: its path and why."""

    file: str
    reason: str


@dataclass(frozen=True, slots=True)
class IngestResult:
    """Where the normalized dataset went and what it holds (``skipped``: the files left
    out, with their reasons, when bad files were skipped)."""

    path: Path
    manifest_path: Path
    n_cells: int
    n_segments: int
    n_rows: int
    files: tuple[str, ...]
    pattern: str = PATTERN
    skipped: tuple[Skipped, ...] = ()


def _refuse(error: IngestError, skipped: list[Skipped] | None) -> None:
    """Raise ``error``, or note its file as skipped when bad files are skipped."""
    if skipped is None:
        raise error
    skipped.append(Skipped(error.file, error.reason))


def _inputs(inputs: Sequence[Path | str], cycler: str,
            skipped: list[Skipped] | None) -> list[tuple[Path, str]]:
    """Every export file to read, with its cycler: files as given (refused when no reader
    takes them), directories walked (files no reader takes are not exports: left alone)."""
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
                _refuse(IngestError(path, "no reader recognizes this file; name the cycler "
                                          f"(one of {sorted(READERS)})"), skipped)
                continue
            found.append((path, kind))
        else:
            raise IngestError(path, "does not exist")
    if not found and not skipped:
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
    for dist in ("battery-data-toolkit", "galvani", "NewareNDA", "pandas"):
        try:
            found[dist] = dist_metadata.version(dist)
        except dist_metadata.PackageNotFoundError:
            continue
    return found


@dataclass
class _Written:
    """What the kept files of the run have written so far."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    owner: dict[tuple[str, int, str], str] = field(default_factory=dict)
    cells: dict[str, list[str]] = field(default_factory=dict)
    cyclers: dict[str, str] = field(default_factory=dict)
    readers: dict[str, str] = field(default_factory=dict)
    current_from: dict[str, str] = field(default_factory=dict)
    file_rows: dict[str, FileRows] = field(default_factory=dict)


def _read_unit(kind: str, unit: list[Path], *, cell: str, protocol: str, done: _Written,
               next_cidx: dict[str, int]) -> list[tuple[int, str, pa.Table, str]]:
    """The segments of one file (or one test's files), checked against what the run
    already holds, or an :class:`IngestError`; nothing is written here, so a file is
    stored whole or not at all. A numbered technique file's cycles continue the cell's.
    Where a reader says where a current came from, ``done.current_from`` notes it."""
    shift = READERS[kind].sequence(unit[0]) is not None
    out: list[tuple[int, str, pa.Table, str]] = []
    notes: dict[str, str] = {}
    measures = read_cell(kind, unit)
    counted = account(kind, unit[0], measures)
    for measure in measures:
        files = ", ".join(measure.files)
        if measure.current_from is not None:
            notes[files] = measure.current_from
        for read_cidx, proto, table in _segments(measure, protocol):
            cidx = read_cidx + (next_cidx.get(proto, 0) if shift else 0)
            key = (cell, cidx, proto)
            if key in done.owner:
                raise IngestError(unit[0], f"cell {cell!r} has {proto} cycle {cidx} in "
                                           f"{done.owner[key]} too; give the files of one "
                                           "cell one test, or separate cells")
            out.append((cidx, proto, table, files))
    done.current_from.update(notes)
    for rows in counted:
        known = done.file_rows.get(rows.files)
        done.file_rows[rows.files] = rows if known is None else known.plus(rows)
    return out


def _unit_failed(error: IngestError, unit: list[Path], skipped: list[Skipped]) -> None:
    """Note a refused unit's files as skipped: the one at fault with its reason, the
    others of its test with that one's name."""
    for path in unit:
        if str(path) == error.file or len(unit) == 1:
            skipped.append(Skipped(str(path), error.reason))
        else:
            skipped.append(Skipped(str(path), f"read with {Path(error.file).name} as one "
                                              "test, which was refused"))


def ingest_exports(
    inputs: Sequence[Path | str], out_dir: Path | str, *, cycler: str = "auto",
    set_id: str | None = None, protocol: str = "cycling", cell_pattern: str | None = None,
    overwrite: bool = False, row_group_rows: int = 65536, on_bad_file: OnBadFile = "stop",
) -> IngestResult:
    """Read the cycler exports ``inputs`` (files or folders) and write the normalized
    dataset under ``out_dir``.

    ``cycler``: ``auto`` (from each file's name and header) or one of :data:`READERS`;
    ``set_id`` (default: ``out_dir``'s name); ``protocol``: the time series' protocol
    (spectra are ``eis``, open-circuit records ``ocv``); ``cell_pattern``: a regular
    expression whose group ``cell`` (else its first group) in a file's name is its cell
    (default: the name without its suffix); files of one cell are one test (MACCOR
    ``.001``, ``.002``, ... in order; EC-Lab's numbered technique files in their order,
    cycles counted on from one file to the next).

    ``on_bad_file``: ``stop`` raises :class:`IngestError` naming the file (and row) at
    fault, and nothing is written; ``skip`` leaves such a file out (a MACCOR test's files
    together), writes the rest and lists what it left out, with why, in
    :attr:`IngestResult.skipped` and ``ingest.json``. Either way a file's segments are
    written all or none, and the output folder changes only when the run succeeds.
    """
    if on_bad_file not in get_args(OnBadFile):
        raise IngestError(out_dir, f"on_bad_file {on_bad_file!r}: one of {get_args(OnBadFile)}")
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
    skipped: list[Skipped] | None = [] if on_bad_file == "skip" else None
    cells: dict[tuple[str, str], list[Path]] = {}
    for path, kind in _inputs(inputs, cycler, skipped):
        try:
            cells.setdefault((cell_of(path, kind, regex), kind), []).append(path)
        except IngestError as exc:
            _refuse(exc, skipped)
    _prepare(out, overwrite=overwrite)
    tmp = out / _TMP
    shutil.rmtree(tmp, ignore_errors=True)
    done = _Written()
    try:
        for (cell, kind), group in sorted(cells.items()):
            reader = READERS[kind]
            units = ([[p] for p in sorted(group, key=lambda p: _order(reader.sequence(p), p))]
                     if reader.per_file else [group])
            next_cidx: dict[str, int] = {}
            for unit in units:
                try:
                    segments = _read_unit(kind, unit, cell=cell, protocol=protocol, done=done,
                                          next_cidx=next_cidx)
                except IngestError as exc:
                    if skipped is None:
                        raise
                    _unit_failed(exc, unit, skipped)
                    continue
                for cidx, proto, table, sources in segments:
                    rel = f"segments/{set_id}/{cell}/{proto}/cycle_{cidx:05d}.parquet"
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    pq.write_table(table, tmp / rel, row_group_size=row_group_rows,
                                   use_dictionary=False)
                    done.owner[(cell, cidx, proto)] = sources
                    next_cidx[proto] = max(next_cidx.get(proto, 0), cidx + 1)
                    done.rows.append({"set_id": set_id, "cell_id": cell, "cidx": cidx,
                                      "protocol": proto, "segment_path": rel,
                                      "row_count": table.num_rows, "cycler": kind,
                                      "source_files": sources})
                done.cells.setdefault(cell, []).extend(str(p) for p in unit)
                done.cyclers[cell] = kind
                done.readers[kind] = reader.library
        if not done.rows:
            why = "; ".join(f"{s.file}: {s.reason}" for s in skipped or ()) or "no rows"
            raise IngestError(", ".join(str(i) for i in inputs),
                              f"no file could be ingested: {why}")
        info = _write_manifest(tmp, done, set_id=set_id, on_bad_file=on_bad_file,
                               skipped=skipped or [])
        for name in _OUTPUTS:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            (tmp / name).rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return IngestResult(out, out / "manifest.parquet", n_cells=len(done.cells),
                        n_segments=len(done.rows), n_rows=int(info["n_rows"]),
                        files=tuple(info["files"]),
                        skipped=tuple(skipped or ()))


def _order(sequence: int | None, path: Path) -> tuple[bool, int, str]:
    """Numbered technique files first, in their order; then the others by name."""
    return (sequence is None, sequence or 0, path.name)


def _write_manifest(tmp: Path, done: _Written, *, set_id: str, on_bad_file: str,
                    skipped: list[Skipped]) -> dict[str, Any]:
    """``manifest.parquet`` and ``ingest.json`` into ``tmp``; the latter's content."""
    rows = sorted(done.rows, key=lambda r: (r["cell_id"], r["cidx"], r["protocol"]))
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([
        ("set_id", pa.string()), ("cell_id", pa.string()), ("cidx", pa.int64()),
        ("protocol", pa.string()), ("segment_path", pa.string()), ("row_count", pa.int64()),
        ("cycler", pa.string()), ("source_files", pa.string())])), tmp / "manifest.parquet")
    info: dict[str, Any] = {
        "generator": "windpipe ingest", "set_id": set_id,
        "files": sorted(f for group in done.cells.values() for f in group),
        "cells": dict(sorted(done.cyclers.items())),
        "cell_files": {cell: sorted(files) for cell, files in sorted(done.cells.items())},
        "readers": dict(sorted(done.readers.items())),
        "library_versions": _versions(), "units": UNITS,
        "sign_convention": "current positive on charge", "manifest": "manifest.parquet",
        "pattern": PATTERN, "n_segments": len(rows),
        "n_rows": sum(r["row_count"] for r in rows),
        "on_bad_file": on_bad_file,
        "current_from": dict(sorted(done.current_from.items())),
        "rows": {files: counts.as_json() for files, counts in sorted(done.file_rows.items())},
        "skipped": [{"file": s.file, "reason": s.reason} for s in skipped],
    }
    (tmp / "ingest.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return info
