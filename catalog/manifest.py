"""Manifest tables: one row per segment, identity + segment path + metadata.

Required columns: ``set_id``, ``cell_id`` (strings), ``cidx`` (integer),
``protocol`` (lower-case string), ``segment_path`` (relative to the storage root).
Optional ``row_count`` (the segment's claimed rows, checked at registration).
Every other column is metadata. Shape problems raise
``WindpipeError(invalid_manifest)`` whose ``details["problems"]`` lists each
problem with the 0-based manifest ``row`` (``None`` for a whole column) and ``column``.
"""

from __future__ import annotations

import io
from typing import Any

import polars as pl

from services.contract.errors import ErrorType, WindpipeError
from services.logging import get_logger
from services.storage.store import PathEscapeError, Storage

__all__ = [
    "IDENTITY_COLUMNS",
    "REQUIRED_COLUMNS",
    "RESERVED_COLUMNS",
    "load_manifest",
    "manifest_error",
    "manifest_from_rows",
    "metadata_columns",
    "normalize_manifest",
]

_log = get_logger("catalog.manifest")

IDENTITY_COLUMNS: tuple[str, ...] = ("set_id", "cell_id", "cidx", "protocol")
REQUIRED_COLUMNS: tuple[str, ...] = (*IDENTITY_COLUMNS, "segment_path")
RESERVED_COLUMNS: frozenset[str] = frozenset(
    {"manifest_row_id", "position", "n_segments", "segment_paths", "segment_rows", "ordinal",
     "manifest_position", "format", "chunk_rows", "fingerprint", "path"}
)
_STRING_COLUMNS = ("set_id", "cell_id", "protocol", "segment_path")
_MAX_LISTED = 100


def manifest_error(problems: list[dict[str, Any]]) -> WindpipeError:
    """The ``invalid_manifest`` error listing ``problems`` (dicts with ``row``, ``problem``)."""
    first = problems[0]
    where = f"row {first['row']}" if first.get("row") is not None else "manifest"
    column = f", column {first['column']!r}" if first.get("column") else ""
    if first.get("segment_path"):
        column += f" (segment {first['segment_path']!r})"
    return WindpipeError(
        ErrorType.INVALID_MANIFEST,
        f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in manifest: "
        f"first: {where}{column}: {first['problem']}",
        details={"problems": problems[:_MAX_LISTED], "problem_count": len(problems)},
    )


def metadata_columns(frame: pl.DataFrame) -> tuple[str, ...]:
    """The metadata columns of a normalized manifest, in manifest order."""
    return tuple(c for c in frame.columns if c not in (*REQUIRED_COLUMNS, "row_count"))


def _row_problems(
    mask: pl.Series, column: str, problem: str, values: pl.Series | None = None
) -> list[dict[str, Any]]:
    rows = mask.arg_true().to_list()
    out = []
    for r in rows[:_MAX_LISTED]:
        # The offending value is not echoed: it may come from a file the caller cannot read.
        text = problem if values is None else f"{problem} (a {values.dtype} value)"
        out.append({"row": int(r), "column": column, "problem": text})
    return out


def _integer_column(
    frame: pl.DataFrame, name: str, *, allow_null: bool
) -> tuple[pl.Series, list[dict[str, Any]]]:
    raw = frame.get_column(name)
    problems: list[dict[str, Any]] = []
    if raw.dtype == pl.Null:
        cast = pl.Series(name, [None] * len(raw), dtype=pl.Int64)
    elif raw.dtype.is_integer():
        cast = raw.cast(pl.Int64, strict=False)
        problems += _row_problems(cast.is_null() & raw.is_not_null(), name, "out of int64 range")
    elif raw.dtype.is_float() or raw.dtype in (pl.String, pl.Boolean):
        if raw.dtype == pl.Boolean:
            as_float = pl.Series(name, [None] * len(raw), dtype=pl.Float64)
        else:
            as_float = raw.cast(pl.Float64, strict=False)
        ok = as_float.is_finite().fill_null(value=False) & (as_float == as_float.round(0))
        bad = raw.is_not_null() & ~ok.fill_null(value=False)
        problems += _row_problems(bad, name, "is not an integer", raw)
        keep = ok.fill_null(value=False)
        cast = pl.select(pl.when(keep).then(as_float).otherwise(None)).to_series()
        cast = cast.cast(pl.Int64)
    else:
        return raw, [{"row": None, "column": name,
                      "problem": f"must hold integers, has type {raw.dtype}"}]
    if not allow_null:
        problems += _row_problems(raw.is_null(), name, "is null")
    elif name == "row_count":
        problems += _row_problems(cast.fill_null(0) < 0, name, "is negative", raw)
    return cast.alias(name), problems


def normalize_manifest(frame: pl.DataFrame) -> pl.DataFrame:
    """Check a manifest's shape and return it with canonical column types and order.

    Idempotent: a normalized manifest passes unchanged.
    """
    if frame.height == 0:
        raise manifest_error([{"row": None, "column": None, "problem": "manifest has no rows"}])
    problems: list[dict[str, Any]] = []
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    problems += [{"row": None, "column": c, "problem": "required column is missing"}
                 for c in missing]
    for col in frame.columns:
        if col in RESERVED_COLUMNS:
            problems.append({"row": None, "column": col,
                             "problem": "column name is reserved for catalog-computed values"})
        elif col not in REQUIRED_COLUMNS and col != "row_count" and frame.schema[col].is_nested():
            problems.append({"row": None, "column": col,
                             "problem": f"metadata must be scalar, has type {frame.schema[col]}"})
    if problems:
        raise manifest_error(problems)

    out: dict[str, pl.Series] = {}
    for name in _STRING_COLUMNS:
        raw = frame.get_column(name)
        if raw.dtype.is_nested():
            problems.append({"row": None, "column": name,
                             "problem": f"must hold strings, has type {raw.dtype}"})
            continue
        values = raw.cast(pl.String)
        problems += _row_problems(values.is_null(), name, "is null")
        problems += _row_problems(
            values.is_not_null() & (values.str.strip_chars() == ""), name, "is empty"
        )
        if name == "protocol":
            bad = values.is_not_null() & (
                (values != values.str.to_lowercase()) | (values != values.str.strip_chars())
                | (values.str.strip_chars() == "")
            )
            problems += _row_problems(
                bad & (values.str.strip_chars() != ""), name,
                "bad protocol name: protocol names are lower-case strings without "
                "surrounding spaces", values,
            )
        out[name] = values
    cidx, found = _integer_column(frame, "cidx", allow_null=False)
    problems += found
    out["cidx"] = cidx
    if "row_count" in frame.columns:
        rc, found = _integer_column(frame, "row_count", allow_null=True)
        problems += found
        out["row_count"] = rc
    if problems:
        problems.sort(key=lambda p: (p["row"] if p["row"] is not None else -1))
        raise manifest_error(problems)
    ordered = [*REQUIRED_COLUMNS] + (["row_count"] if "row_count" in out else [])
    return pl.DataFrame(
        [out[c] for c in ordered] + [frame.get_column(c) for c in metadata_columns(frame)]
    )


def manifest_from_rows(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """A normalized manifest from row dicts (as the SDK sends them)."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise WindpipeError(ErrorType.INVALID_MANIFEST, "manifest rows must be a list of objects")
    try:
        frame = pl.DataFrame(rows, infer_schema_length=None)
    except Exception as exc:
        _log.warning("manifest.unreadable", error=f"{type(exc).__name__}: {exc}")
        raise WindpipeError(
            ErrorType.INVALID_MANIFEST, "manifest rows cannot be read as a table (columns of "
            f"mixed types?): {type(exc).__name__}"
        ) from exc
    return normalize_manifest(frame)


def load_manifest(storage: Storage, path: str) -> pl.DataFrame:
    """Read ``path`` (``.parquet`` or ``.csv``, relative to the root) and normalize it."""
    try:
        rel = storage.validate_relative_path(path)
    except PathEscapeError as exc:
        raise WindpipeError(ErrorType.INVALID_MANIFEST, f"manifest path: {exc}") from exc
    lower = rel.lower()
    if not lower.endswith((".parquet", ".pq", ".csv")):
        raise WindpipeError(
            ErrorType.INVALID_MANIFEST,
            f"manifest {rel!r} must be a .parquet or .csv file",
        )
    try:
        data = storage.get(rel)
    except FileNotFoundError as exc:
        raise WindpipeError(
            ErrorType.INVALID_MANIFEST, f"manifest {rel!r} does not exist under the root"
        ) from exc
    try:
        if lower.endswith(".csv"):
            frame = pl.read_csv(io.BytesIO(data), infer_schema_length=None)
        else:
            frame = pl.read_parquet(io.BytesIO(data))
    except Exception as exc:
        _log.warning("manifest.unreadable", path=rel, error=f"{type(exc).__name__}: {exc}")
        raise WindpipeError(
            ErrorType.INVALID_MANIFEST,
            f"manifest {rel!r} cannot be read as {'CSV' if lower.endswith('.csv') else 'parquet'} "
            f"({type(exc).__name__}; the server log has the details)",
        ) from exc
    return normalize_manifest(frame)
