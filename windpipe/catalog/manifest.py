"""Manifest tables: one row per segment, identity + segment path + metadata.

Required columns: ``set_id``, ``cell_id`` (strings), ``cidx`` (integer),
``protocol`` (lower-case string), ``segment_path`` (relative to the storage root).
Optional ``row_count`` (the segment's claimed rows, checked at registration).
Every other column is metadata. Shape problems raise
``WindpipeError(invalid_manifest)`` whose ``details["problems"]`` lists the first
problems with the 0-based manifest ``row`` (``None`` for a whole column) and ``column``
(``details["problem_count"]`` counts them all; ``windpipe.catalog.problems``).

A manifest file is bounded before it is decoded: its size (``WINDPIPE_MAX_MANIFEST_BYTES``,
from the store's listing) and its rows (``WINDPIPE_MAX_MANIFEST_ROWS``: a parquet file's
footer, a CSV file's records counted without decoding them).
"""

from __future__ import annotations

import io
from typing import Any

import polars as pl

from windpipe.catalog.limits import check_manifest_bytes, check_manifest_rows
from windpipe.catalog.problems import ProblemLog, manifest_error
from windpipe.services.contract.errors import InvalidManifest, WindpipeError
from windpipe.services.contract.limits import Limits
from windpipe.services.logging import get_logger
from windpipe.services.storage.store import PathEscapeError, Storage

__all__ = [
    "IDENTITY_COLUMNS",
    "REQUIRED_COLUMNS",
    "RESERVED_COLUMNS",
    "load_manifest",
    "manifest_error",
    "manifest_from_rows",
    "metadata_columns",
    "normalize_manifest",
    "read_table",
]

_log = get_logger("catalog.manifest")

IDENTITY_COLUMNS: tuple[str, ...] = ("set_id", "cell_id", "cidx", "protocol")
REQUIRED_COLUMNS: tuple[str, ...] = (*IDENTITY_COLUMNS, "segment_path")
RESERVED_COLUMNS: frozenset[str] = frozenset(
    {"manifest_row_id", "position", "n_segments", "segment_paths", "segment_rows", "ordinal",
     "manifest_position", "format", "chunk_rows", "fingerprint", "path"}
)
_STRING_COLUMNS = ("set_id", "cell_id", "protocol", "segment_path")


def metadata_columns(frame: pl.DataFrame) -> tuple[str, ...]:
    """The metadata columns of a normalized manifest, in manifest order."""
    return tuple(c for c in frame.columns if c not in (*REQUIRED_COLUMNS, "row_count"))


def _row_problems(
    log: ProblemLog, mask: pl.Series, column: str, problem: str,
    values: pl.Series | None = None,
) -> None:
    """Add the rows where ``mask`` holds (the first ``log.listed`` built, the rest counted)."""
    rows = mask.arg_true()
    # The offending value is not echoed: it may come from a file the caller cannot read.
    text = problem if values is None else f"{problem} (a {values.dtype} value)"
    log.extend(({"row": int(r), "column": column, "problem": text}
                for r in rows.head(log.listed).to_list()),
               more=max(len(rows) - log.listed, 0))


def _integer_column(
    frame: pl.DataFrame, name: str, log: ProblemLog, *, allow_null: bool
) -> pl.Series:
    raw = frame.get_column(name)
    if raw.dtype == pl.Null:
        cast = pl.Series(name, [None] * len(raw), dtype=pl.Int64)
    elif raw.dtype.is_integer():
        cast = raw.cast(pl.Int64, strict=False)
        _row_problems(log, cast.is_null() & raw.is_not_null(), name, "out of int64 range")
    elif raw.dtype.is_float() or raw.dtype in (pl.String, pl.Boolean):
        if raw.dtype == pl.Boolean:
            as_float = pl.Series(name, [None] * len(raw), dtype=pl.Float64)
        else:
            as_float = raw.cast(pl.Float64, strict=False)
        ok = as_float.is_finite().fill_null(value=False) & (as_float == as_float.round(0))
        bad = raw.is_not_null() & ~ok.fill_null(value=False)
        _row_problems(log, bad, name, "is not an integer", raw)
        keep = ok.fill_null(value=False)
        cast = pl.select(pl.when(keep).then(as_float).otherwise(None)).to_series()
        cast = cast.cast(pl.Int64)
    else:
        log.add({"row": None, "column": name,
                 "problem": f"must hold integers, has type {raw.dtype}"})
        return raw
    if not allow_null:
        _row_problems(log, raw.is_null(), name, "is null")
    elif name == "row_count":
        _row_problems(log, cast.fill_null(0) < 0, name, "is negative", raw)
    return cast.alias(name)


def normalize_manifest(frame: pl.DataFrame) -> pl.DataFrame:
    """Check a manifest's shape and return it with canonical column types and order.

    Idempotent: a normalized manifest passes unchanged.
    """
    if frame.height == 0:
        raise manifest_error([{"row": None, "column": None, "problem": "manifest has no rows"}])
    problems = ProblemLog()
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    problems.extend({"row": None, "column": c, "problem": "required column is missing"}
                    for c in missing)
    for col in frame.columns:
        if col in RESERVED_COLUMNS:
            problems.add({"row": None, "column": col,
                          "problem": "column name is reserved for catalog-computed values"})
        elif col not in REQUIRED_COLUMNS and col != "row_count" and frame.schema[col].is_nested():
            problems.add({"row": None, "column": col,
                          "problem": f"metadata must be scalar, has type {frame.schema[col]}"})
    if problems:
        raise problems.error()

    out: dict[str, pl.Series] = {}
    for name in _STRING_COLUMNS:
        raw = frame.get_column(name)
        if raw.dtype.is_nested():
            problems.add({"row": None, "column": name,
                          "problem": f"must hold strings, has type {raw.dtype}"})
            continue
        values = raw.cast(pl.String)
        _row_problems(problems, values.is_null(), name, "is null")
        _row_problems(
            problems, values.is_not_null() & (values.str.strip_chars() == ""), name, "is empty"
        )
        if name == "protocol":
            bad = values.is_not_null() & (
                (values != values.str.to_lowercase()) | (values != values.str.strip_chars())
                | (values.str.strip_chars() == "")
            )
            _row_problems(
                problems, bad & (values.str.strip_chars() != ""), name,
                "bad protocol name: protocol names are lower-case strings without "
                "surrounding spaces", values,
            )
        out[name] = values
    out["cidx"] = _integer_column(frame, "cidx", problems, allow_null=False)
    if "row_count" in frame.columns:
        out["row_count"] = _integer_column(frame, "row_count", problems, allow_null=True)
    if problems:
        raise problems.error()
    ordered = [*REQUIRED_COLUMNS] + (["row_count"] if "row_count" in out else [])
    return pl.DataFrame(
        [out[c] for c in ordered] + [frame.get_column(c) for c in metadata_columns(frame)]
    )


def manifest_from_rows(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """A normalized manifest from row dicts (as the SDK sends them)."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InvalidManifest("manifest rows must be a list of objects")
    try:
        frame = _frame_of_rows(rows)
    except Exception as exc:
        _log.warning("manifest.unreadable", error=f"{type(exc).__name__}: {exc}")
        raise InvalidManifest(
            "manifest rows cannot be read as a table (columns of "
            f"mixed types?): {type(exc).__name__}"
        ) from exc
    return normalize_manifest(frame)


_ROWS_PER_SLICE = 5_000


def _frame_of_rows(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """One table of ``rows``, built a slice at a time: one polars call over every row
    holds the interpreter lock ~0.2 s per 200,000 rows, and the catalog's event loop (its
    ``/healthz``) waits that long; between slices the lock is given back. The slices are
    joined as polars joins them (a column's type the supertype of its slices', a key
    missing from a slice null there), which is what one call over every row infers."""
    if len(rows) <= _ROWS_PER_SLICE:
        return pl.DataFrame(rows, infer_schema_length=None)
    frames = [pl.DataFrame(rows[i:i + _ROWS_PER_SLICE], infer_schema_length=None)
              for i in range(0, len(rows), _ROWS_PER_SLICE)]
    return pl.concat(frames, how="diagonal_relaxed", rechunk=True)


def load_manifest(storage: Storage, path: str, *, limits: Limits | None = None) -> pl.DataFrame:
    """Read ``path`` (``.parquet`` or ``.csv``, relative to the root) and normalize it.

    Its size is checked against ``limits`` before it is read, its rows before they are
    decoded (a parquet file's footer; a CSV file's records, counted).
    """
    return normalize_manifest(read_table(storage, path, limits=limits))


def read_table(
    storage: Storage, path: str, *, limits: Limits | None = None, what: str = "manifest",
) -> pl.DataFrame:
    """The table at ``path`` (``.parquet`` or ``.csv`` under the root), bounded as a
    manifest is (bytes before it is read, rows before they are decoded) and not
    normalized; ``what`` names it in the errors (``invalid_manifest``)."""
    limits = limits or Limits()
    try:
        rel = storage.validate_relative_path(path)
    except PathEscapeError as exc:
        raise InvalidManifest(f"{what} path: {exc}") from exc
    lower = rel.lower()
    if not lower.endswith((".parquet", ".pq", ".csv")):
        raise InvalidManifest(
            f"{what} {rel!r} must be a .parquet or .csv file",
        )
    csv = lower.endswith(".csv")
    try:
        check_manifest_bytes(storage.head(rel).size, limits)
        if not csv:
            check_manifest_rows(_footer_rows(storage, rel, what=what), limits)
        data = storage.get(rel)
    except FileNotFoundError as exc:
        raise InvalidManifest(
            f"{what} {rel!r} does not exist under the root"
        ) from exc
    try:
        if csv:
            check_manifest_rows(_csv_rows(data), limits)
            frame = pl.read_csv(io.BytesIO(data), infer_schema_length=None)
        else:
            frame = pl.read_parquet(io.BytesIO(data))
    except WindpipeError:
        raise
    except Exception as exc:
        raise _unreadable(rel, exc, kind="CSV" if csv else "parquet", what=what) from exc
    del data
    check_manifest_rows(frame.height, limits)
    return frame


def _csv_rows(data: bytes) -> int:
    """A CSV file's rows, counted without decoding them (a streaming count of records)."""
    counted = pl.scan_csv(io.BytesIO(data), infer_schema_length=0).select(pl.len()).collect()
    return int(counted.item())


def _footer_rows(storage: Storage, rel: str, *, what: str) -> int:
    """The rows a parquet file's footer declares (only the footer is read)."""
    try:
        with storage.open_parquet(rel) as file:
            return int(file.metadata.num_rows)
    except (FileNotFoundError, WindpipeError):
        raise
    except Exception as exc:
        raise _unreadable(rel, exc, kind="parquet", what=what) from exc


def _unreadable(rel: str, exc: Exception, *, kind: str, what: str) -> WindpipeError:
    _log.warning("manifest.unreadable", path=rel, error=f"{type(exc).__name__}: {exc}")
    return InvalidManifest(
        f"{what} {rel!r} cannot be read as {kind} "
        f"({type(exc).__name__}; the server log has the details)",
    )
