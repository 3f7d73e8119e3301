"""Registration: validate a manifest and every segment it lists, before anything is stored.

:func:`prepare_version` collects the problems (paths, missing or corrupt
segments, row counts, segments of one manifest row with different columns, duplicate segments,
metadata that disagrees within an identity) and raises one
``WindpipeError(invalid_manifest)`` listing the first (``windpipe.catalog.problems``), each naming
its 0-based manifest row, and counting them all. On success the caller stores the
returned :class:`PreparedVersion` as is.

Segments are inspected in manifest order, in batches on a few threads
(:mod:`windpipe.catalog.batched`); once
:data:`windpipe.catalog.problems.MAX_LISTED` of them failed, no more are opened (a manifest
naming a million missing files is answered after about a hundred look-ups), and the
answer says the count is a lower bound (``details.problems_complete``). Nothing kept
per segment outlives its inspection but its description or its one-line problem.

A manifest *row* of SEMANTICS section 1 is an identity ``(set_id, cell_id, cidx,
protocol)``: all segment rows sharing it, in listed order, even when they are not
adjacent in the manifest.

With ``on_bad_file="skip"`` (a registration by pattern may ask for it), the files that
cannot be read as segments are left out instead (:mod:`windpipe.catalog.bad_files`): every
segment is checked, none stops the checks, and the version is built from the others;
its id is the digest of the segments it holds, like any version's, so the same files
kept give the same version however they were chosen.

Content already registered under another dataset is a ``conflict``
(:func:`registered_elsewhere`) that names that dataset and version only to a caller who
may read it. A registration job is shared by every request of the same dataset and body,
whoever sent it, so the job keeps the named conflict and each answer is written for its
caller (:func:`error_seen_by`), never once for all of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from windpipe.catalog.bad_files import OnBadFile, SkippedFiles, all_skipped_error, files_to_skip
from windpipe.catalog.batched import REMOTE_REQUESTS, workers_for
from windpipe.catalog.canonical import identity_ids, row_json
from windpipe.catalog.checks import LOCAL_WORKERS, check_segments
from windpipe.catalog.described import Described
from windpipe.catalog.manifest import IDENTITY_COLUMNS, metadata_columns, normalize_manifest
from windpipe.catalog.manifest_paths import unique_paths
from windpipe.catalog.problems import ProblemLog
from windpipe.catalog.tally import FigureTally
from windpipe.catalog.version_schema import column_problems, protocol_schema
from windpipe.services.contract.errors import Conflict, WindpipeError
from windpipe.services.contract.identity import canonical_json
from windpipe.services.storage.packs import PackWriter
from windpipe.services.storage.segments import ColumnInfo, SegmentInfo
from windpipe.services.storage.store import Storage

__all__ = [
    "PreparedVersion",
    "error_seen_by",
    "prepare_version",
    "registered_elsewhere",
    "version_digest",
]

_IDENT = list(IDENTITY_COLUMNS)


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
    ``figures``: the profile figures the checks took from the bytes they read (small
    parquet files), summed (:class:`windpipe.catalog.tally.FigureTally`), so that
    :func:`windpipe.catalog.profile.profile_version` reads only the other segments (None: no
    figures taken, every segment is read). ``skipped``: the files left out
    (``on_bad_file="skip"``; empty otherwise).
    """

    version_id: str
    root_uri: str
    manifest_rows: pl.DataFrame
    segments: pl.DataFrame
    schema: dict[str, list[dict[str, Any]]]
    metadata_columns: tuple[str, ...]
    figures: FigureTally | None = None
    skipped: SkippedFiles = dataclasses.field(default_factory=SkippedFiles)

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


def registered_elsewhere(*, dataset: str, version_id: str, holder: str,
                         visible: Callable[[str], bool] | None) -> Conflict:
    """The ``conflict`` of registering under ``dataset`` the content that is version
    ``version_id`` of dataset ``holder``: naming both only when ``visible(holder)`` (None:
    the caller sees every dataset), else naming nothing of them (their names are
    information too, docs/security.md)."""
    if visible is not None and not visible(holder):
        return Conflict("this content is already registered under a dataset name outside "
                        "your scope", details={"dataset": dataset})
    return Conflict(f"this content is already registered as version {version_id!r} of "
                    f"dataset {holder!r}", details={"version_id": version_id, "dataset": holder})


def error_seen_by(error: WindpipeError, *, dataset: str,
                  visible: Callable[[str], bool] | None) -> WindpipeError:
    """``error``, the outcome of a registration under ``dataset``, as the caller that
    ``visible`` describes may see it: a named :func:`registered_elsewhere` conflict is
    written again for that caller; any other error is the same for everyone."""
    details = error.details
    holder, version_id = details.get("dataset"), details.get("version_id")
    if isinstance(error, Conflict) and set(details) == {"dataset", "version_id"} \
            and isinstance(holder, str) and isinstance(version_id, str) and holder != dataset:
        return registered_elsewhere(dataset=dataset, version_id=version_id, holder=holder,
                                    visible=visible)
    return error


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


def prepare_version(
    storage: Storage,
    manifest: pl.DataFrame,
    *,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
    requests: int = REMOTE_REQUESTS,
    pack: PackWriter | None = None,
    on_bad_file: OnBadFile = "stop",
) -> PreparedVersion:
    """Validate ``manifest`` against ``storage`` and describe the version it makes.

    ``progress(done, total)`` is called after each segment is inspected; ``workers``:
    the threads reading segments (None: :func:`windpipe.catalog.batched.workers_for` the root);
    ``requests``: on an object store, the parquet segments' requests in flight at once
    (0: none fetched ahead, each segment read by its check on the threads); ``pack``:
    where the checks of a local root put the rows of the small files they read
    (:mod:`windpipe.services.storage.packs`; the caller commits or aborts it).
    Raises
    ``WindpipeError(invalid_manifest)`` with ``details["problems"]`` (``row``,
    ``segment_path``, ``problem``: the first :data:`windpipe.catalog.problems.MAX_LISTED`) and
    ``details["problem_count"]`` when anything is wrong; nothing is partial.
    ``on_bad_file="skip"``: the files that cannot be read as segments, and the others
    of their identities, are left out (``PreparedVersion.skipped``) instead of being
    problems (:mod:`windpipe.catalog.bad_files`); when that leaves nothing, ``invalid_manifest``.
    """
    frame = normalize_manifest(manifest)
    meta = metadata_columns(frame)
    raw = frame.get_column("segment_path")
    problems = ProblemLog()
    # syntax only: inspecting the segment checks symlinks
    paths, at = unique_paths(raw, problems, _problem)  # at[k]: the manifest row of segment k
    _metadata_problems(frame, meta, problems)

    if workers is None:
        workers = LOCAL_WORKERS if storage.is_local else workers_for(storage)
    skip = on_bad_file == "skip"
    described, figures = check_segments(
        storage, paths, frame.get_column("protocol").gather(at), progress=progress,
        stop_after=paths.len() + 1 if skip else problems.listed, workers=workers,
        requests=requests, pack=pack)
    if described.done < paths.len():
        problems.stop(f"segment checks stopped after {problems.listed} failed "
                      f"({described.done} of {paths.len()} segments checked)")
    if not skip:
        _segment_problems(frame, described, at, problems)
    _row_count_problems(frame, described, at, problems)
    if skip:
        if problems:  # a path or metadata problem is the request's: never skipped
            raise problems.error()
        return _skipping(storage, frame, meta, described, paths=paths, figures=figures,
                         pack=pack)
    columns_id = np.full(frame.height, -1, dtype=np.int64)
    columns_id[at] = described.columns_id
    column_problems(frame, columns_id, described.column_lists, problems,
                    lambda row, text: _problem(row, raw[row], text))
    if problems:
        raise problems.error()
    return _build(storage, frame, meta, described.frame(), columns_id=described.columns_id,
                  column_lists=described.column_lists, paths=paths, figures=figures)


def _skipping(storage: Storage, frame: pl.DataFrame, meta: tuple[str, ...],
              described: Described, *, paths: pl.Series, figures: FigureTally,
              pack: PackWriter | None) -> PreparedVersion:
    """The version of the files that are not skipped (every row of ``frame`` is a
    segment, in order). The profile's sums hold nothing of a file that failed its
    check, so they only need renumbering; should a skipped file have been read (the
    other of its identity), they and the pack hold its rows: the profile then reads
    the version's segments again and no pack is written."""
    keep, skipped = files_to_skip(frame, described)
    if not skipped:
        return _build(storage, frame, meta, described.frame(),
                      columns_id=described.columns_id, column_lists=described.column_lists,
                      paths=paths, figures=figures)
    if not keep.any():
        raise all_skipped_error(skipped)
    kept = pl.Series(keep)
    if skipped.read:
        if pack is not None:
            pack.abort()
        tally = None
    else:
        figures.renumber(np.cumsum(keep) - 1)
        tally = figures
    prepared = _build(storage, frame.filter(kept), meta, described.frame().filter(kept),
                      columns_id=described.columns_id[keep],
                      column_lists=described.column_lists, paths=paths.filter(kept),
                      figures=tally)
    return dataclasses.replace(prepared, skipped=skipped)


def _segment_problems(frame: pl.DataFrame, described: Described, at: np.ndarray,
                      log: ProblemLog) -> None:
    """The segments that failed their checks (``at[k]``: the manifest row of segment
    ``k``)."""
    raw = frame.get_column("segment_path")
    for k, text in described.problems.items():
        row = int(at[k])
        log.add(_problem(row, raw[row], text))


def _row_count_problems(frame: pl.DataFrame, described: Described, at: np.ndarray,
                        log: ProblemLog) -> None:
    """The segments whose rows differ from the manifest's ``row_count``."""
    if "row_count" not in frame.columns:
        return
    raw = frame.get_column("segment_path")
    want = frame.get_column("row_count").gather(at)
    have = pl.Series(described.row_count)
    bad = (want.is_not_null() & pl.Series(described.columns_id >= 0)
           & (want.cast(pl.Int64, strict=False) != have)).fill_null(value=False)
    for k in bad.arg_true().to_list():
        row = int(at[k])
        log.add(_problem(row, raw[row],
                         f"row_count is {want[k]} in the manifest but the segment has "
                         f"{int(described.row_count[k])} rows"))


def version_digest(root_uri: str, canonical: pl.DataFrame, *, chunk: int = 8192,
                   order: pl.Series | None = None) -> str:
    """The version id: a digest of the canonical JSON of ``{"kind", "root", "columns",
    "rows"}`` (``canonical``'s rows, sorted: in the order of the row indices ``order``
    when given), its rows written by polars (:func:`windpipe.catalog.canonical.row_json`) and
    hashed ``chunk`` rows at a time, so that a collection's rows are never all text, nor
    all sorted, at once (the same bytes as one ``canonical_json`` of the whole
    payload)."""
    head = canonical_json({"kind": "windpipe-version-v1", "root": root_uri,
                           "columns": canonical.columns})
    digest = hashlib.sha256(head[:-1] + b',"rows":[')  # keys sorted: "rows" comes last
    step = max(1, chunk)
    for k, start in enumerate(range(0, canonical.height, step)):
        part = (canonical.slice(start, step) if order is None
                else canonical[order.slice(start, step)])
        rows = row_json(part).str.join(",").item()
        digest.update((b"," if k else b"") + rows.encode())
    digest.update(b"]}")
    return "v-" + digest.hexdigest()[:32]


def _build(
    storage: Storage, frame: pl.DataFrame, meta: tuple[str, ...], found: pl.DataFrame, *,
    columns_id: np.ndarray, column_lists: list[tuple[ColumnInfo, ...]],
    paths: pl.Series, figures: FigureTally | None,
) -> PreparedVersion:
    """The version of ``frame``'s rows, each a segment described by the same row of
    ``found`` (:meth:`Described.frame`) and ``columns_id`` (into ``column_lists``)."""
    seg = frame.select(*_IDENT, *meta).with_columns(
        paths.alias("path"),
        found.get_column("format"),
        found.get_column("row_count"),
        found.get_column("chunk_rows"),
        found.get_column("fingerprint"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("manifest_position"),
    ).with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(_IDENT).alias("ordinal"))

    rows = (
        seg.group_by(_IDENT, maintain_order=True)
        .agg(*[pl.col(c).first() for c in meta], pl.col("row_count").sum())
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("position"))
    )
    rows = rows.with_columns(identity_ids(rows.select(_IDENT))).select(
        "manifest_row_id", *_IDENT, *meta, "row_count", "position"
    )
    # joined on the identity alone and sorted by index: no copy of the segments' columns
    seg = seg.with_columns(seg.select(_IDENT).join(
        rows.select("manifest_row_id", *_IDENT), on=_IDENT, how="left",
        maintain_order="left").get_column("manifest_row_id"))
    version_id = version_digest(
        storage.uri, seg.select(*_IDENT, *meta, "path", "format", "row_count", "fingerprint"),
        order=seg.select(pl.arg_sort_by([*_IDENT, "ordinal"])).to_series())

    schema = protocol_schema(seg.get_column("protocol"), seg.get_column("manifest_row_id"),
                             columns_id, column_lists)
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
