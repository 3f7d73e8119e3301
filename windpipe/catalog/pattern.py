"""A manifest built from the files under a root and a path pattern (no manifest file).

``"{cell_id}/{protocol}/cycle_{cidx}.parquet"`` names one segment per matching file
(or zarr v3 group: a pattern ending in ``.zarr``). The pattern is ``/``-separated
components of literal text and fields, ``{name}`` or ``{name:type}`` (``str``, ``int``,
``float``; ``cidx`` is ``int``, the other identity fields ``str``):

- ``cell_id`` and ``cidx`` are fields. ``set_id`` and ``protocol`` are fields or fixed
  for every row (``set_id=``, default: the dataset's name; ``protocol=``, default
  ``cycling``).
- Any other field is a metadata column. A field whose name starts with ``_`` is not
  stored: it orders the segments of one identity (``cycle_{cidx}_part{_part:int}.parquet``);
  without one, two files of the same identity are refused.
- A field matches one or more characters other than ``/``; two fields are separated by
  literal text; the pattern ends in ``.parquet``, ``.pq`` or ``.zarr``.
- A pattern has at most 16 fields and 1024 characters; a name it matches (a file's or a
  folder's) has at most 255 characters (:mod:`windpipe.catalog.pattern_syntax`, whose matcher
  costs at most name length x pattern length, never the splits of a name among fields).

The catalog lists the root one folder at a time (:func:`windpipe.services.storage.listing.
list_folder`, confined to the root) from the pattern's leading literal folders down to
its depth, skipping names that start with ``.``, never descending into a zarr group.
Every segment-like entry at the pattern's depth (a ``.parquet``/``.pq`` file, a ``.zarr``
folder) must match, and one elsewhere whose name fits the last component (a segment in
the wrong folder) is refused too, naming the path and the component that differs; other
files (``cells.csv``, ``manifest.parquet`` beside the folders) are ignored. Files and
folders listed, and segments matched, are each bounded by ``WINDPIPE_MAX_MANIFEST_ROWS``:
with the bounds above, the matching work of one registration is bounded too. In the
catalog it runs in the registration's job, on the storage pool, never on the event loop.
Metadata may also come from a side table (``metadata=``: a ``.csv``/``.parquet`` path
under the root, or ``metadata_rows``) keyed by ``cell_id`` (and ``set_id`` when it has
that column): every cell must have one row.

``exclude`` globs (:func:`windpipe.catalog.pattern_syntax.compile_excludes`: whole paths relative
to the root, ``fnmatch`` rules) leave paths out of the walk before anything else: a
matching file or zarr group is not a segment nor a problem, a matching folder is not
listed. ``on_bad_file`` is for the segment checks that follow
(:func:`windpipe.catalog.registration.prepare_version`): ``"skip"`` leaves out the files that
cannot be read as segments, and the others of their identity.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import polars as pl

from windpipe.catalog.bad_files import OnBadFile
from windpipe.catalog.limits import check_manifest_rows
from windpipe.catalog.manifest import IDENTITY_COLUMNS, RESERVED_COLUMNS, read_table
from windpipe.catalog.pattern_syntax import (
    ParsedPattern,
    bad_pattern,
    compile_excludes,
    match_path,
    parse_pattern,
)
from windpipe.catalog.problems import ProblemLog
from windpipe.services.contract.errors import (
    ErrorType,
    InvalidManifest,
    InvalidRequest,
    WindpipeError,
)
from windpipe.services.contract.limits import Limits, check_limit
from windpipe.services.storage.listing import list_folder
from windpipe.services.storage.store import PathEscapeError, Storage

__all__ = ["ParsedPattern", "PatternSource", "manifest_from_pattern", "parse_pattern"]

DEFAULT_PROTOCOL = "cycling"
_TYPES = {"str": pl.String, "int": pl.Int64, "float": pl.Float64}
_FILE_SUFFIXES = (".parquet", ".pq")
_LISTING_THREADS = 8


@dataclass(frozen=True)
class PatternSource:
    """What a registration by pattern names: the pattern, the fixed ``set_id`` /
    ``protocol`` (when not fields), an optional side table (a path under the root, or
    its rows) keyed by ``cell_id``, the globs of paths to leave out (``exclude``) and
    what a file that cannot be read as a segment does (``on_bad_file``: ``"stop"`` the
    registration, or be left out with a reason, ``"skip"``)."""

    pattern: str
    set_id: str | None = None
    protocol: str | None = None
    metadata: str | None = None
    metadata_rows: list[dict[str, Any]] | None = None
    exclude: tuple[str, ...] = ()
    on_bad_file: OnBadFile = "stop"


def _segment_like(name: str, *, folder: bool) -> bool:
    return name.endswith(".zarr") if folder else name.endswith(_FILE_SUFFIXES)


def _walk(storage: Storage, parsed: ParsedPattern, limits: Limits,
          problems: list[dict[str, Any]], left_out: Callable[[str], bool],
          ) -> tuple[list[str], list[str]]:
    """The segment-like paths at the pattern's depth (matching or not: checked later) and a
    few other files seen; problems for segments of the other kind at that depth, and for
    entries elsewhere whose name fits the pattern's last component (a segment misplaced).
    A path ``left_out`` is passed over (a folder: not listed)."""
    depth = len(parsed.components)
    final = parsed.components[-1]

    def fits(name: str) -> bool:  # the last component's shape: a segment misplaced?
        return final.match(name) is not None

    found: list[str] = []
    seen: list[str] = []
    listed = 0
    level = [parsed.start]
    with ThreadPoolExecutor(_LISTING_THREADS) as pool:
        for i in range(depth):
            last = i == depth - 1
            nxt: list[str] = []
            for folder in pool.map(lambda f: list_folder(storage, f), level):
                listed += len(folder.folders) + len(folder.files)
                check_limit("max_manifest_rows", listed, limits.max_manifest_rows,
                            what=f"files and folders listed for pattern {parsed.text!r}",
                            kind=ErrorType.INVALID_MANIFEST)
                for path, _size in folder.files:
                    name = path.rsplit("/", 1)[-1]
                    if name.startswith(".") or left_out(path):
                        continue
                    if last and not parsed.zarr and _segment_like(name, folder=False):
                        found.append(path)
                    elif _segment_like(name, folder=False) and (last or fits(name)):
                        problems.append(_misplaced(parsed, path, folder=False))
                    elif len(seen) < 5:
                        seen.append(path)
                for path in folder.folders:
                    name = path.rsplit("/", 1)[-1]
                    if name.startswith(".") or left_out(path):
                        continue
                    if _segment_like(name, folder=True):
                        if last and parsed.zarr:
                            found.append(path)
                        elif last or fits(name):
                            problems.append(_misplaced(parsed, path, folder=True))
                    elif last and not parsed.zarr and fits(name):
                        problems.append({"row": None, "segment_path": path, "problem":
                                         "is a folder; a parquet segment is one file"})
                    elif not last:
                        nxt.append(path)
            check_manifest_rows(len(found), limits)
            level = nxt
    return found, seen


def _misplaced(parsed: ParsedPattern, path: str, *, folder: bool) -> dict[str, Any]:
    kind = "a zarr group" if folder else "a parquet file"
    want = "zarr groups" if parsed.zarr else "parquet files"
    depth = path.count("/") + 1
    full = len(parsed.prefix) + len(parsed.components)
    if depth == full:
        text = f"is {kind}; the pattern names {want}"
    else:
        text = f"is {kind} at depth {depth}; the pattern names {want} at depth {full}"
    return {"row": None, "segment_path": path, "problem": text}


def _pattern_error(parsed: ParsedPattern, problems: ProblemLog) -> WindpipeError:
    listed = problems.problems()
    first = listed[0]
    total = f"{problems.count}" if problems.complete else f"at least {problems.count}"
    return InvalidManifest(
        f"{total} problem{'s' if problems.count != 1 else ''} with the files for pattern "
        f"{parsed.text!r}: first: {first['segment_path']!r} {first['problem']}",
        details={"problems": listed, "problem_count": problems.count,
                 "problems_complete": problems.complete, "pattern": parsed.text},
    )


def manifest_from_pattern(
    storage: Storage, source: PatternSource, *, dataset: str, limits: Limits | None = None,
) -> pl.DataFrame:
    """The manifest (not yet normalized) of the segments under ``storage`` matching
    ``source.pattern``, one row per segment, in identity order."""
    limits = limits or Limits()
    parsed = parse_pattern(source.pattern)
    for name, fixed in (("set_id", source.set_id), ("protocol", source.protocol)):
        if fixed is not None and name in parsed.types:
            raise bad_pattern(parsed.text,
                              f"{name} is a field of the pattern and given as {fixed!r}")
    excluded = compile_excludes(source.exclude)
    table_path = None
    if source.metadata is not None:
        try:
            table_path = storage.normalize_relative_path(source.metadata)
        except PathEscapeError as exc:
            raise InvalidManifest(f"metadata table path: {exc}") from exc
    misfits: list[dict[str, Any]] = []
    try:
        found, seen = _walk(storage, parsed, limits, misfits,
                            lambda path: path == table_path or excluded(path))
    except PathEscapeError as exc:
        raise InvalidManifest(f"pattern {parsed.text!r}: {exc}",
                              details={"pattern": parsed.text}) from exc
    rows: list[dict[str, Any]] = []
    for path in found:
        values = match_path(parsed, path)
        if isinstance(values, str):
            misfits.append({"row": None, "segment_path": path, "problem": values})
        else:
            rows.append({**values, "segment_path": path})
    problems = ProblemLog()
    problems.extend(sorted(misfits, key=lambda p: p["segment_path"]))  # listed by path
    if problems:
        raise _pattern_error(parsed, problems)
    if not rows:
        where = f"under {parsed.start!r}" if parsed.start else "under the root"
        hint = f"; other files there: {seen}" if seen else ""
        if source.exclude:
            hint += f"; paths its {len(source.exclude)} exclude glob(s) match are left out"
        raise InvalidManifest(
            f"pattern {parsed.text!r} matched no segment {where} of {storage.uri}{hint}",
            details={"pattern": parsed.text})
    frame = _frame(parsed, rows, set_id=source.set_id or dataset,
                   protocol=source.protocol or DEFAULT_PROTOCOL)
    _check_duplicates(parsed, frame, problems)
    if problems:
        raise _pattern_error(parsed, problems)
    side = _side_table(storage, source, limits)
    if side is not None:
        frame = _join_metadata(parsed, frame, side)
    return frame.drop([c for c in frame.columns if c.startswith("_")])


def _frame(parsed: ParsedPattern, rows: list[dict[str, Any]], *, set_id: str,
           protocol: str) -> pl.DataFrame:
    schema = {name: _TYPES[kind] for name, kind in parsed.types.items()}
    frame = pl.DataFrame(rows, schema={**schema, "segment_path": pl.String})
    fixed = {c: v for c, v in (("set_id", set_id), ("protocol", protocol)) if c not in schema}
    frame = frame.with_columns(pl.lit(v, dtype=pl.String).alias(c) for c, v in fixed.items())
    order = [c for c in parsed.types if c.startswith("_")]
    frame = frame.sort([*IDENTITY_COLUMNS, *order, "segment_path"])
    meta = [c for c in parsed.types if c not in IDENTITY_COLUMNS]
    return frame.select(*IDENTITY_COLUMNS, "segment_path", *meta)


def _check_duplicates(parsed: ParsedPattern, frame: pl.DataFrame, problems: ProblemLog) -> None:
    keys = [*IDENTITY_COLUMNS, *(c for c in parsed.types if c.startswith("_"))]
    dup = frame.with_columns(
        pl.col("segment_path").first().over(keys).alias("_first_path"),
        pl.int_range(pl.len()).over(keys).alias("_nth"),
    ).filter(pl.col("_nth") > 0)
    hint = ("" if len(keys) > len(IDENTITY_COLUMNS) else
            "; to concatenate the files of one identity, order them with a field such as "
            "{_part:int}")
    problems.extend(({"row": None, "segment_path": rec["segment_path"], "problem":
                      "gives the identity (set_id, cell_id, cidx, protocol) = "
                      f"{tuple(rec[c] for c in IDENTITY_COLUMNS)} of "
                      f"{rec['_first_path']!r}{hint}"}
                     for rec in dup.head(problems.listed).iter_rows(named=True)),
                    more=max(dup.height - problems.listed, 0))


def _side_table(storage: Storage, source: PatternSource, limits: Limits) -> pl.DataFrame | None:
    if source.metadata is not None and source.metadata_rows is not None:
        raise InvalidRequest("give at most one of 'metadata' (a path) and 'metadata_rows'")
    if source.metadata is not None:
        return read_table(storage, source.metadata, limits=limits, what="metadata table")
    if source.metadata_rows is None:
        return None
    check_manifest_rows(len(source.metadata_rows), limits)
    try:
        return pl.DataFrame(source.metadata_rows, infer_schema_length=None)
    except Exception as exc:
        raise InvalidManifest(
            "metadata rows cannot be read as a table (columns of "
            f"mixed types?): {type(exc).__name__}") from exc


def _join_metadata(parsed: ParsedPattern, frame: pl.DataFrame,
                   side: pl.DataFrame) -> pl.DataFrame:
    what = "metadata table"
    if "cell_id" not in side.columns:
        raise InvalidManifest(f"the {what} needs a cell_id column; it has {side.columns}")
    keys = ["set_id", "cell_id"] if "set_id" in side.columns else ["cell_id"]
    taken = {*IDENTITY_COLUMNS, *parsed.types, "segment_path", "row_count", *RESERVED_COLUMNS}
    for col in side.columns:
        if col not in keys and col in taken:
            raise InvalidManifest(f"the {what}'s column {col!r} is an identity column, a field "
                                  "of the pattern or a reserved name")
        if side.schema[col].is_nested():
            raise InvalidManifest(f"the {what}'s column {col!r} must be scalar, has type "
                                  f"{side.schema[col]}")
    side = side.with_columns(pl.col(k).cast(pl.String) for k in keys)
    log = ProblemLog()
    indexed = side.with_row_index("_row")
    for rec in indexed.filter(pl.any_horizontal(pl.col(k).is_null() for k in keys)).head(
            log.listed).iter_rows(named=True):
        log.add({"row": rec["_row"], "column": "cell_id", "problem": f"{what}: key is null"})
    dups = indexed.filter(pl.int_range(pl.len()).over(keys) > 0)
    for rec in dups.head(log.listed).iter_rows(named=True):
        log.add({"row": rec["_row"], "problem": f"{what}: a second row for "
                 f"{tuple(rec[k] for k in keys)}"})
    cells = frame.group_by(keys, maintain_order=True).agg(pl.col("segment_path").first())
    lacking = cells.join(side.select(keys), on=keys, how="anti")
    for rec in lacking.head(log.listed).iter_rows(named=True):
        log.add({"row": None, "segment_path": rec["segment_path"], "problem":
                 f"cell {tuple(rec[k] for k in keys)} has no row in the {what}"})
    if log:
        raise log.error()
    return frame.join(side, on=keys, how="left", maintain_order="left")
