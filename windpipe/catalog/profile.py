"""What registration learns about the values: nulls, infinities, irregular sampling.

A registered version carries a :class:`windpipe.services.contract.stats.VersionProfile`
(``VersionOut.profile``), and its findings come back as warnings of the registration
answer (``null_values``, ``non_finite_values``, ``irregular_sampling``; the SDK raises
them as ``windpipe.sdk.DataWarning``), so a notebook shows them, never silently: a null input
is ``-2.0`` in a batch (SEMANTICS 5), which on an unscaled channel looks like a value.

The cost is kept low: a small local parquet file is profiled while registration's
checks hold its bytes (they read it whole to fingerprint its footer; the figures ride
with the prepared version, :mod:`windpipe.catalog.figures`), so no segment is opened twice for
it. Any other segment (zarr, a larger file, an object store, figures a mixed-type
column makes insufficient) is read once more after the checks, in batches on a few
threads (:mod:`windpipe.catalog.batched`), and only for the columns that need it: float columns
(a NaN or an infinity is in no footer) and the time column. The null counts of a
parquet segment's other numeric columns come from its footer's statistics, unread
(:func:`windpipe.services.storage.segments.unread_null_counts`; ``null_counts_from_footer``
counts those column-segments, whichever way the segment was profiled); zarr integer
arrays cannot hold a null. A version registered again answers its stored profile
without reading.

Irregular sampling, per segment with a time column (``time_s``), over its finite
times: a *non-monotonic* step is one where time does not increase (``<= 0``); a *gap*
is a step more than ``GAP_FACTOR`` times both of its neighbouring steps, both of them
positive (the one neighbour at either end), so a protocol that changes its sampling
rate from one phase to the next is not flagged, a hole in a steady recording is, and
the jump back after a step back is not counted twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import polars as pl
from sqlalchemy.orm import Session, sessionmaker

from windpipe.catalog.batched import batched_map, workers_for
from windpipe.catalog.figures import FLOATING, Sampling, sampling_problem
from windpipe.catalog.registration import PreparedVersion
from windpipe.catalog.repository import Repository
from windpipe.catalog.tally import MAX_LISTED, Cell, FigureTally, plain
from windpipe.services.contract.stats import (
    TIME_COLUMN,
    ColumnProfile,
    SamplingProblem,
    VersionProfile,
)
from windpipe.services.database import session_scope
from windpipe.services.storage.segments import ColumnInfo, SegmentInfo, read_all, unread_null_counts
from windpipe.services.storage.store import Storage

__all__ = ["MAX_LISTED", "bounded_map", "profile_for", "profile_version", "profile_warnings",
           "sampling_problem"]

_SHOWN = 4  # columns named in one warning's message

T = TypeVar("T")
R = TypeVar("R")
# ({column: (nulls, non_finite)}, sampling or None, columns counted from the footer)
Found = tuple[dict[str, tuple[int, int]], Sampling | None, int]


def bounded_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int,
                ) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` in the order of ``items``, computed on ``workers`` threads, at
    most ``2 * workers`` submitted ahead (memory stays bounded whatever the number of
    items; the order keeps what is computed from the results deterministic)."""
    todo = iter(items)
    pending: deque[tuple[T, Future[R]]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="windpipe-read") as pool:
        try:
            while True:
                while len(pending) < 2 * workers and (item := next(todo, None)) is not None:
                    pending.append((item, pool.submit(fn, item)))
                if not pending:
                    return
                item, fut = pending.popleft()
                yield item, fut.result()
        finally:
            for _item, fut in pending:
                fut.cancel()


def profile_for(sessions: sessionmaker[Session], storage: Storage,
                prepared: PreparedVersion, *,
                progress: Callable[[int, int], None] | None = None) -> VersionProfile:
    """The stored profile of this version when it is registered already, else a new one
    (``progress(done, total)`` after each segment read for it)."""
    with session_scope(sessions) as session:
        existing = Repository(session).get_version(prepared.version_id)
        stored = None if existing is None else existing.profile
    if stored is not None:
        return VersionProfile.model_validate(stored)
    return profile_version(storage, prepared, progress=progress)


def _reread_infos(prepared: PreparedVersion, indices: list[int],
                  ) -> dict[int, tuple[SegmentInfo, str, list[str]]]:
    """Per segment ``indices`` (manifest order): its info (columns typed as the version's
    schema types them), protocol and numeric columns. The columns of a segment depend
    only on its protocol and the columns its manifest row lacks, so each such set is
    built once (a collection has a handful, whatever its size)."""
    numeric = {p: [(c, frozenset(c.get("missing", ()))) for c in cols if c.get("numeric")]
               for p, cols in prepared.schema.items()}
    lacking = {p: frozenset().union(*(m for _c, m in cols)) for p, cols in numeric.items()}
    built: dict[tuple[str, int | None], tuple[tuple[ColumnInfo, ...], list[str]]] = {}
    seg = prepared.segments.with_row_index("_k")[indices].join(
        prepared.manifest_rows.select("manifest_row_id", "protocol"), on="manifest_row_id",
        how="left", maintain_order="left")
    out = {}
    for k, mrid, protocol, path, fmt, n, chunks, fp in seg.select(
            "_k", "manifest_row_id", "protocol", "path", "format", "row_count", "chunk_rows",
            "fingerprint").iter_rows():
        key = (protocol, mrid if mrid in lacking.get(protocol, ()) else None)
        if key not in built:
            cols = [c for c, missing in numeric.get(protocol, ()) if mrid not in missing]
            built[key] = (tuple(ColumnInfo(c["name"], str(c["dtype"]), numeric=True)
                                for c in cols), [c["name"] for c in cols])
        columns, names = built[key]
        info = SegmentInfo(path=path, format=fmt, row_count=int(n), columns=columns,
                           chunk_rows=tuple(chunks), fingerprint=fp)
        out[int(k)] = (info, str(protocol), names)
    return out


def _profile_segment(storage: Storage, info: SegmentInfo, names: list[str]) -> Found:
    """``({column: (nulls, non_finite)}, sampling or None, columns counted from the
    footer)`` of one segment."""
    plain = [n for n in names if not any(f in info.column(n).dtype for f in FLOATING)
             and n != TIME_COLUMN]
    known = unread_null_counts(storage, info, plain) if plain else {}
    read = [n for n in names if n not in known]
    counts = {n: (k, 0) for n, k in known.items()}
    sampling = None
    if read and info.row_count:
        arrays = read_all(storage, info, read)
        for name, values in arrays.items():
            nan = int(np.count_nonzero(np.isnan(values)))
            inf = int(np.count_nonzero(np.isinf(values)))
            counts[name] = (nan, inf)
        if TIME_COLUMN in arrays:
            sampling = sampling_problem(arrays[TIME_COLUMN])
    return counts, sampling, len(known)


def _rereads(prepared: PreparedVersion, tally: FigureTally) -> dict[int, list[str] | None]:
    """The segments the profile reads: those without figures (None: every column), and
    those whose footer counted the nulls of a column the version types as floating or
    ``mixed`` (the rules read such a column: its name)."""
    out: dict[int, list[str] | None] = dict.fromkeys(tally.unfigured)
    types = {(p, c["name"]): c for p, cols in prepared.schema.items() for c in cols
             if c.get("numeric")}
    for (protocol, name), cell in tally.cells.items():
        entry = types.get((protocol, name))
        if entry is None or plain(name, str(entry["dtype"])):
            continue
        for k in cell.footer_at:
            if k in out and out[k] is None:
                continue
            out.setdefault(k, [])
            out[k].append(name)  # type: ignore[union-attr]
    return out


def profile_version(storage: Storage, prepared: PreparedVersion, *,
                    progress: Callable[[int, int], None] | None = None) -> VersionProfile:
    """Profile the version: from the figures the checks summed (``prepared.figures``)
    where they answer, else reading what needs reading of a segment once
    (``progress(done, total)``: once for the segments the figures answered, then after
    each segment read). ``prepared.figures`` is not changed."""
    total = prepared.segments.height
    fused = prepared.figures if prepared.figures is not None else FigureTally()
    if prepared.figures is None:
        fused.unfigured.extend(range(total))
    rereads = _rereads(prepared, fused)
    done = total - len(rereads)
    if progress is not None and done:
        progress(done, total)
    infos = _reread_infos(prepared, sorted(rereads))
    read = FigureTally()  # what the profile reads, summed apart
    from_footer = 0

    def work(k: int) -> Found:
        info, _protocol, names = infos[k]
        wanted = rereads[k]
        return _profile_segment(storage, info, names if wanted is None else wanted)

    for k, (counts, sampling, footer) in batched_map(work, sorted(rereads),
                                                     workers=workers_for(storage)):
        info, protocol, names = infos[k]
        wanted = rereads[k]
        if wanted is None:
            read.add_read(k, info, protocol, counts, sampling, names=names)
            from_footer += footer
        else:  # summed already but for these columns
            read.add_read(k, info, protocol, counts, None, names=wanted, rows=False)
        done += 1
        if progress is not None:
            progress(done, total)
    return _aggregate(prepared, fused, read, from_footer=from_footer)


def _aggregate(prepared: PreparedVersion, fused: FigureTally, read: FigureTally, *,
               from_footer: int) -> VersionProfile:
    """The version's profile from the figures summed by the checks (``fused``) and by the
    profile's reads, under the rules of the version's schema."""
    types = {(p, c["name"]): str(c["dtype"]) for p, cols in prepared.schema.items()
             for c in cols if c.get("numeric")}
    columns = []
    for key in sorted(set(fused.cells) | set(read.cells)):
        dtype = types.get(key)
        if dtype is None:
            continue
        mine, more = fused.cells.get(key, Cell()), read.cells.get(key, Cell())
        nulls = mine.nan + more.nan
        if plain(key[1], dtype):  # its footer counts stand (the rules count them so)
            nulls += mine.footer
            from_footer += mine.footer_segments
        columns.append(ColumnProfile(protocol=key[0], column=key[1], rows=mine.rows + more.rows,
                                     nulls=nulls, non_finite=mine.inf + more.inf))
    timed = {p for p, c in types if c == TIME_COLUMN}
    irregular = {p: fused.irregular.get(p, 0) + read.irregular.get(p, 0) for p in timed}
    listed = sorted([*fused.listing(timed), *read.listing(timed)])[:MAX_LISTED]
    problems = [SamplingProblem(path=path, protocol=protocol, rows=rows, gaps=s[0],
                                non_monotonic=s[1], median_step=s[2], max_step=s[3])
                for _k, path, protocol, rows, s in listed]
    return VersionProfile(columns=columns,
                          irregular_segments={p: n for p, n in sorted(irregular.items()) if n},
                          sampling=problems, null_counts_from_footer=from_footer)


def _listing(items: list[tuple[str, int, int]]) -> str:
    shown = ", ".join(f"{c} ({n:,} of {rows:,} rows)" for c, n, rows in items[:_SHOWN])
    more = len(items) - _SHOWN
    return shown + (f" and {more} more column(s)" if more > 0 else "")


def profile_warnings(profile: VersionProfile | None) -> list[dict[str, Any]]:
    """The registration warnings of a profile: per protocol, the columns holding nulls,
    those holding infinities, and the segments sampled irregularly."""
    if profile is None:
        return []
    frame = pl.DataFrame([c.model_dump() for c in profile.columns],
                         schema={"protocol": pl.String, "column": pl.String, "rows": pl.Int64,
                                 "nulls": pl.Int64, "non_finite": pl.Int64})
    out: list[dict[str, Any]] = []
    for protocol in sorted(set(frame.get_column("protocol").to_list())):
        mine = frame.filter(pl.col("protocol") == protocol)
        nulls = [(c, n, r) for c, n, r in mine.filter(pl.col("nulls") > 0)
                 .select("column", "nulls", "rows").iter_rows()]
        if nulls:
            out.append({
                "type": "null_values", "protocol": protocol,
                "columns": {c: n for c, n, _r in nulls},
                "message": f"{protocol}: null or NaN values in {_listing(nulls)}: such "
                           "inputs are -2.0 in a batch and such targets NaN (SEMANTICS 5); "
                           "scale the column so -2.0 stands out, mask with target_valid",
            })
        inf = [(c, n, r) for c, n, r in mine.filter(pl.col("non_finite") > 0)
               .select("column", "non_finite", "rows").iter_rows()]
        if inf:
            out.append({
                "type": "non_finite_values", "protocol": protocol,
                "columns": {c: n for c, n, _r in inf},
                "message": f"{protocol}: +inf or -inf values in {_listing(inf)}: windpipe "
                           "reads them as nulls (SEMANTICS 5)",
            })
    for protocol, count in profile.irregular_segments.items():
        listed = [s for s in profile.sampling if s.protocol == protocol]
        first = listed[0] if listed else None
        out.append({
            "type": "irregular_sampling", "protocol": protocol, "segments": count,
            "gaps": sum(s.gaps for s in listed),
            "non_monotonic": sum(s.non_monotonic for s in listed),
            "message": f"{protocol}: {profile.time_column} is sampled irregularly in "
                       f"{count} segment(s) ({sum(s.gaps for s in listed)} gaps, "
                       f"{sum(s.non_monotonic for s in listed)} non-monotonic steps in the "
                       "listed ones)" + (f", first {first.path!r}" if first else "")
                       + ": a window runs over them as if rows were evenly spaced; "
                       "ver.profile.sampling lists them",
        })
    return out
