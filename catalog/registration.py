"""Registration: validate a manifest and every segment it lists, before anything is stored.

:func:`prepare_version` collects the problems (paths, missing or corrupt
segments, row counts, segments of one manifest row with different columns, duplicate segments,
metadata that disagrees within an identity) and raises one
``WindpipeError(invalid_manifest)`` listing the first (``catalog.problems``), each naming
its 0-based manifest row, and counting them all. On success the caller stores the
returned :class:`PreparedVersion` as is.

Segments are inspected in manifest order, in batches on a few threads
(:mod:`catalog.batched`); once
:data:`catalog.problems.MAX_LISTED` of them failed, no more are opened (a manifest
naming a million missing files is answered after about a hundred look-ups), and the
answer says the count is a lower bound (``details.problems_complete``). Nothing kept
per segment outlives its inspection but its description or its one-line problem.

A manifest *row* of SEMANTICS section 1 is an identity ``(set_id, cell_id, cidx,
protocol)``: all segment rows sharing it, in listed order, even when they are not
adjacent in the manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import polars as pl
import pyarrow as pa

from catalog.batched import REMOTE_REQUESTS, batched_map, prefetched_map, workers_for
from catalog.figures import SegmentFigures, figures_of, values_of_file
from catalog.manifest import IDENTITY_COLUMNS, metadata_columns, normalize_manifest
from catalog.problems import ProblemLog
from services.contract.identity import canonical_json, manifest_row_id
from services.contract.stats import TIME_COLUMN
from services.storage.segments import (
    ColumnInfo,
    SegmentInfo,
    SegmentProblem,
    inspect_segment_values,
)
from services.storage.store import PathEscapeError, Storage

__all__ = ["PreparedVersion", "prepare_version", "version_digest"]

_IDENT = list(IDENTITY_COLUMNS)
_PARQUET_NAMES = (".parquet", ".pq")  # named parquet: no marker to look for first


@dataclass(frozen=True, eq=False)
class PreparedVersion:
    """A validated dataset version, ready to store.

    ``manifest_rows``: one row per identity (``manifest_row_id``, identity,
    metadata, ``row_count`` summed over its segments, ``position`` = order of first
    appearance in the manifest). ``segments``: one row per segment in manifest
    order (``manifest_row_id``, ``ordinal`` within its identity, ``path``
    (normalized), ``format``, ``row_count``, ``chunk_rows`` list[int64],
    ``fingerprint``, ``manifest_position`` = the segment's 0-based manifest row).
    ``schema``: per protocol, the union of its segments' columns as ``{"name",
    "dtype", "numeric"}`` (in the order first seen); a column some manifest rows lack
    adds ``"missing"``: those rows' ``manifest_row_id`` values, sorted. ``dtype`` is the
    column's arrow type, or ``"mixed(a|b)"`` when segments disagree; ``numeric`` holds
    when every segment's type is numeric (all are read as float64, SEMANTICS 5).
    ``figures``: per segment path, the profile figures the checks took from the bytes
    they read (:mod:`catalog.figures`; small local parquet files), so that
    :func:`catalog.profile.profile_version` reads only the other segments.
    """

    version_id: str
    root_uri: str
    manifest_rows: pl.DataFrame
    segments: pl.DataFrame
    schema: dict[str, list[dict[str, Any]]]
    metadata_columns: tuple[str, ...]
    figures: Mapping[str, SegmentFigures] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        """Rows over all segments."""
        return int(self.segments.get_column("row_count").sum())

    def segment_info(self, ordinal_row: int) -> SegmentInfo:
        """The :class:`SegmentInfo` of row ``ordinal_row`` of ``segments``."""
        row = self.segments.row(ordinal_row, named=True)
        mrid = row["manifest_row_id"]
        protocol = self.manifest_rows.filter(
            pl.col("manifest_row_id") == row["manifest_row_id"]
        ).get_column("protocol")[0]
        return SegmentInfo(
            path=row["path"],
            format=row["format"],
            row_count=int(row["row_count"]),
            columns=tuple(ColumnInfo(c["name"], c["dtype"], c["numeric"])
                          for c in self.schema[protocol] if mrid not in c.get("missing", ())),
            chunk_rows=tuple(int(x) for x in row["chunk_rows"]),
            fingerprint=row["fingerprint"],
        )


def _problem(row: int, path: Any, text: str) -> dict[str, Any]:
    return {"row": int(row), "segment_path": path, "problem": text}


def _metadata_problems(frame: pl.DataFrame, meta: tuple[str, ...], log: ProblemLog) -> None:
    if not meta:
        return
    indexed = frame.with_row_index("_row")
    flags = indexed.select(
        "_row",
        "segment_path",
        *[pl.col(c).first().over(_IDENT).alias(f"_first_{c}") for c in meta],
        *[pl.col("_row").first().over(_IDENT).alias("_first_row")],
        *[pl.col(c).ne_missing(pl.col(c).first().over(_IDENT)).alias(f"_bad_{c}") for c in meta],
        *[pl.col(c) for c in meta],
    )
    for c in meta:
        bad = flags.filter(pl.col(f"_bad_{c}"))
        log.extend((_problem(
            rec["_row"], rec["segment_path"],
            f"metadata {c!r} is {rec[c]!r} here but {rec[f'_first_{c}']!r} in row "
            f"{rec['_first_row']} of the same identity",
        ) for rec in bad.head(log.listed).iter_rows(named=True)),
            more=max(bad.height - log.listed, 0))


def _column_problems(
    frame: pl.DataFrame, canon: list[str | None],
    infos: dict[str, SegmentInfo | str], raw_paths: list[Any], log: ProblemLog,
) -> None:
    """Segments of one manifest row must hold the same column names (types may differ):
    a manifest row is one measurement, with one set of sensors."""
    first: dict[tuple[Any, ...], tuple[int, frozenset[str]]] = {}
    for row, (ident, cpath) in enumerate(zip(frame.select(_IDENT).iter_rows(), canon,
                                             strict=True)):
        info = infos.get(cpath) if cpath is not None else None
        if not isinstance(info, SegmentInfo):
            continue
        names = frozenset(c.name for c in info.columns)
        seen = first.setdefault(ident, (row, names))
        if seen[1] != names:
            parts = []
            if missing := sorted(seen[1] - names):
                parts.append(f"missing columns {missing}")
            if extra := sorted(names - seen[1]):
                parts.append(f"extra columns {extra}")
            log.add(_problem(
                row, raw_paths[row],
                f"columns differ from the segment in row {seen[0]} of the same manifest row "
                f"(segments of one manifest row hold the same columns): {'; '.join(parts)}",
            ))


def _protocol_schema(
    protocols: list[str], mrids: list[int], infos: list[SegmentInfo]
) -> dict[str, list[dict[str, Any]]]:
    """Per protocol: the union of its segments' columns, with the manifest rows lacking each."""
    dtypes: dict[str, dict[str, dict[str, bool]]] = {}
    rows: dict[str, dict[int, set[str]]] = {}
    for protocol, mrid, info in zip(protocols, mrids, infos, strict=True):
        cols = dtypes.setdefault(protocol, {})
        for c in info.columns:
            cols.setdefault(c.name, {})[c.dtype] = c.numeric
        rows.setdefault(protocol, {})[mrid] = {c.name for c in info.columns}
    schema: dict[str, list[dict[str, Any]]] = {}
    for protocol, cols in dtypes.items():
        entries = []
        for name, types in cols.items():
            kinds = sorted(types)
            entry: dict[str, Any] = {
                "name": name,
                "dtype": kinds[0] if len(kinds) == 1 else f"mixed({'|'.join(kinds)})",
                "numeric": all(types.values()),
            }
            missing = sorted(m for m, have in rows[protocol].items() if name not in have)
            if missing:
                entry["missing"] = missing
            entries.append(entry)
        schema[protocol] = entries
    return schema


_Inspected = tuple[SegmentInfo, SegmentFigures | None] | str


def _inspect(storage: Storage, path: str) -> _Inspected:
    """The segment's description and the profile figures of the bytes read for it (None:
    not a small local parquet file), or its problem's text (the exception, its traceback
    and what that holds are dropped here; so are the values once counted)."""
    try:
        info, values = inspect_segment_values(storage, path, also=(TIME_COLUMN,))
    except SegmentProblem as exc:
        return exc.message
    held = storage.held(info.path) if values is None else None
    if held is not None and held.whole and info.format == "parquet":
        values = values_of_file(storage, info, held.tail, also=(TIME_COLUMN,))
    if values is None:
        return info, None
    try:
        return info, figures_of(values)
    except (pa.ArrowException, ValueError, TypeError):
        return info, None  # the profile reads the segment as before, and says what is wrong


def _shared(info: SegmentInfo, shared: dict[Any, Any]) -> SegmentInfo:
    """``info`` holding the one copy of its column list that ``shared`` keeps: a
    collection's segments share a handful of column lists, and a registration holds
    every segment's description until it is stored (memory grows with the segments)."""
    columns = shared.setdefault(info.columns, info.columns)
    return info if columns is info.columns else dataclasses.replace(info, columns=columns)


def _shared_figures(figures: SegmentFigures, shared: dict[Any, Any]) -> SegmentFigures:
    """``figures`` holding the one copy of its footer counts ``shared`` keeps."""
    key = ("footer", *figures.footer_nulls.items())
    footer = shared.setdefault(key, figures.footer_nulls)
    return figures if footer is figures.footer_nulls else dataclasses.replace(
        figures, footer_nulls=footer)


def _inspect_all(
    storage: Storage, paths: list[str], progress: Callable[[int, int], None] | None,
    *, stop_after: int, workers: int, requests: int,
) -> tuple[dict[str, SegmentInfo | str], dict[str, SegmentFigures]]:
    """Inspect ``paths`` on at most ``workers`` threads, in batches, in order
    (:mod:`catalog.batched`); on an object store the parquet files first, fetched ahead
    one request each with at most ``requests`` in flight and checked from what was
    fetched (:func:`catalog.batched.prefetched_map`). No new batch is started once
    ``stop_after`` have failed (the rest are missing from the answer). Also answers the
    profile figures taken."""
    results: dict[str, SegmentInfo | str] = {}
    figures: dict[str, SegmentFigures] = {}
    total = len(paths)
    failed = [0]  # read by the stop check between batches

    def stop() -> bool:
        return failed[0] >= stop_after

    def inspect(path: str) -> _Inspected:
        return _inspect(storage, path)

    remote = not storage.is_local and requests > 0
    ahead = [p for p in paths if remote and p.endswith(_PARQUET_NAMES)]
    rest = [p for p in paths if not (remote and p.endswith(_PARQUET_NAMES))]
    found_all = chain(prefetched_map(_inspect, storage, ahead, requests=requests, stop=stop),
                      batched_map(inspect, rest, workers=min(workers, max(len(rest), 1)),
                                  stop=stop))
    shared: dict[Any, Any] = {}  # one copy of each equal column list and footer count
    for path, found in found_all:
        if isinstance(found, str):
            results[path] = found
            failed[0] += 1
        else:
            results[path] = _shared(found[0], shared)
            if found[1] is not None:
                figures[path] = _shared_figures(found[1], shared)
        if progress is not None:
            progress(len(results), total)
    return results, figures


def prepare_version(
    storage: Storage,
    manifest: pl.DataFrame,
    *,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
    requests: int = REMOTE_REQUESTS,
) -> PreparedVersion:
    """Validate ``manifest`` against ``storage`` and describe the version it makes.

    ``progress(done, total)`` is called after each segment is inspected; ``workers``:
    the threads reading segments (None: :func:`catalog.batched.workers_for` the root);
    ``requests``: on an object store, the parquet segments' requests in flight at once
    (0: none fetched ahead, each segment read by its check on the threads).
    Raises
    ``WindpipeError(invalid_manifest)`` with ``details["problems"]`` (``row``,
    ``segment_path``, ``problem``: the first :data:`catalog.problems.MAX_LISTED`) and
    ``details["problem_count"]`` when anything is wrong; nothing is partial.
    """
    frame = normalize_manifest(manifest)
    meta = metadata_columns(frame)
    raw_paths = frame.get_column("segment_path").to_list()
    claimed = (
        frame.get_column("row_count").to_list() if "row_count" in frame.columns
        else [None] * frame.height
    )
    problems = ProblemLog()
    canon: list[str | None] = []
    first_row: dict[str, int] = {}
    for row, raw in enumerate(raw_paths):
        try:  # syntax only: inspecting the segment checks symlinks
            path = storage.normalize_relative_path(raw)
        except PathEscapeError as exc:
            problems.add(_problem(row, raw, f"invalid segment path: {exc}"))
            canon.append(None)
            continue
        if path in first_row:
            problems.add(_problem(
                row, raw, f"segment listed twice (first in row {first_row[path]})"
            ))
            canon.append(None)
            continue
        first_row[path] = row
        canon.append(path)
    _metadata_problems(frame, meta, problems)

    infos, figures = _inspect_all(storage, list(first_row), progress, stop_after=problems.listed,
                                  workers=workers_for(storage) if workers is None else workers,
                                  requests=requests)
    if len(infos) < len(first_row):
        problems.stop(f"segment checks stopped after {problems.listed} failed "
                      f"({len(infos)} of {len(first_row)} segments checked)")
    for row, cpath in enumerate(canon):
        info = infos.get(cpath) if cpath is not None else None
        if info is None:
            continue
        if isinstance(info, str):
            problems.add(_problem(row, raw_paths[row], info))
            continue
        want = claimed[row]
        if want is not None and int(want) != info.row_count:
            problems.add(_problem(
                row, raw_paths[row],
                f"row_count is {want} in the manifest but the segment has "
                f"{info.row_count} rows",
            ))

    _column_problems(frame, canon, infos, raw_paths, problems)
    if problems:
        raise problems.error()

    good: list[SegmentInfo] = [infos[p] for p in canon]  # type: ignore[misc,index]
    return _build(storage, frame, meta, good, figures)


def version_digest(root_uri: str, canonical: pl.DataFrame, *, chunk: int = 8192) -> str:
    """The version id: a digest of the canonical JSON of ``{"kind", "root", "columns",
    "rows"}`` (``canonical``'s rows, sorted), hashed ``chunk`` rows at a time, so that a
    collection's rows are never all Python lists at once (the same bytes as one
    ``canonical_json`` of the whole payload)."""
    head = canonical_json({"kind": "windpipe-version-v1", "root": root_uri,
                           "columns": canonical.columns})
    digest = hashlib.sha256(head[:-1] + b',"rows":[')  # keys sorted: "rows" comes last
    for k, part in enumerate(canonical.iter_slices(max(1, chunk))):
        rows = canonical_json([list(r) for r in part.iter_rows()])
        digest.update((b"," if k else b"") + rows[1:-1])
    digest.update(b"]}")
    return "v-" + digest.hexdigest()[:32]


def _build(
    storage: Storage, frame: pl.DataFrame, meta: tuple[str, ...], infos: list[SegmentInfo],
    figures: Mapping[str, SegmentFigures],
) -> PreparedVersion:
    seg = frame.select(*_IDENT, *meta).with_columns(
        pl.Series("path", [i.path for i in infos], dtype=pl.String),
        pl.Series("format", [i.format for i in infos], dtype=pl.String),
        pl.Series("row_count", [i.row_count for i in infos], dtype=pl.Int64),
        pl.Series("chunk_rows", [list(i.chunk_rows) for i in infos], dtype=pl.List(pl.Int64)),
        pl.Series("fingerprint", [i.fingerprint for i in infos], dtype=pl.String),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("manifest_position"),
    ).with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(_IDENT).alias("ordinal"))

    rows = (
        seg.group_by(_IDENT, maintain_order=True)
        .agg(*[pl.col(c).first() for c in meta], pl.col("row_count").sum())
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("position"))
    )
    ids = [
        manifest_row_id(s, c, i, p)
        for s, c, i, p in rows.select(_IDENT).iter_rows()
    ]
    rows = rows.with_columns(pl.Series("manifest_row_id", ids, dtype=pl.Int64)).select(
        "manifest_row_id", *_IDENT, *meta, "row_count", "position"
    )
    seg = seg.join(rows.select("manifest_row_id", *_IDENT), on=_IDENT, how="left",
                   maintain_order="left")

    canonical = seg.sort([*_IDENT, "ordinal"]).select(
        *_IDENT, *meta, "path", "format", "row_count", "fingerprint"
    )
    version_id = version_digest(storage.uri, canonical)

    schema = _protocol_schema(seg.get_column("protocol").to_list(),
                              seg.get_column("manifest_row_id").to_list(), infos)
    segments = seg.select(
        "manifest_row_id", "ordinal", "path", "format", "row_count", "chunk_rows",
        "fingerprint", "manifest_position",
    )
    return PreparedVersion(
        version_id=version_id,
        root_uri=storage.uri,
        manifest_rows=rows,
        segments=segments,
        schema=schema,
        metadata_columns=meta,
        figures=figures,
    )
