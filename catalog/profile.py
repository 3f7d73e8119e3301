"""What registration learns about the values: nulls, infinities, irregular sampling.

A registered version carries a :class:`services.contract.stats.VersionProfile`
(``VersionOut.profile``), and its findings come back as warnings of the registration
answer (``null_values``, ``non_finite_values``, ``irregular_sampling``; the SDK raises
them as ``sdk.DataWarning``), so a notebook shows them, never silently: a null input
is ``-2.0`` in a batch (SEMANTICS 5), which on an unscaled channel looks like a value.

The cost is kept low: once every segment has passed registration's checks, each is
read once (a small local parquet file in one read), in batches on a few threads
(:mod:`catalog.batched`), and only for the columns that need it: float columns
(a NaN or an infinity is in no footer) and the time column. The null counts of a
parquet segment's other numeric columns come from its footer's statistics, unread
(:func:`services.storage.segments.unread_null_counts`); zarr integer arrays cannot
hold a null. A version registered again answers its stored profile without reading.

Irregular sampling, per segment with a time column (``time_s``), over its finite
times: a *non-monotonic* step is one where time does not increase (``<= 0``); a *gap*
is a step more than ``GAP_FACTOR`` times both of its neighbouring steps, both of them
positive (the one neighbour at either end), so a protocol that changes its sampling
rate from one phase to the next is not flagged, a hole in a steady recording is, and
the jump back after a step back is not counted twice.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import polars as pl
from sqlalchemy.orm import Session, sessionmaker

from catalog.batched import batched_map, workers_for
from catalog.registration import PreparedVersion
from catalog.repository import Repository
from services.contract.stats import (
    GAP_FACTOR,
    TIME_COLUMN,
    ColumnProfile,
    SamplingProblem,
    VersionProfile,
)
from services.database import session_scope
from services.storage.segments import ColumnInfo, SegmentInfo, read_all, unread_null_counts
from services.storage.store import Storage

__all__ = ["MAX_LISTED", "bounded_map", "profile_for", "profile_version", "profile_warnings",
           "sampling_problem"]

MAX_LISTED = 100
_SHOWN = 4  # columns named in one warning's message
_FLOATING = ("float", "double", "mixed")

T = TypeVar("T")
R = TypeVar("R")


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


def sampling_problem(times: np.ndarray) -> tuple[int, int, float | None, float | None]:
    """``(gaps, non_monotonic, median positive step, largest step)`` of a time column."""
    t = times[np.isfinite(times)]
    if t.shape[0] < 2:
        return 0, 0, None, None
    d = np.diff(t)
    non_monotonic = int(np.count_nonzero(d <= 0))
    gaps = 0
    if d.shape[0] >= 2:
        left = np.concatenate((d[1:2], d[:-1]))
        right = np.concatenate((d[1:], d[-2:-1]))
        near = np.maximum(left, right)
        gaps = int(np.count_nonzero((np.minimum(left, right) > 0) & (d > GAP_FACTOR * near)))
    positive = d[d > 0]
    median = float(np.median(positive)) if positive.shape[0] else None
    return gaps, non_monotonic, median, float(d.max())


def _segments(prepared: PreparedVersion) -> list[tuple[SegmentInfo, str, list[str]]]:
    """Per segment (manifest order): its info, protocol and numeric columns."""
    numeric = {p: [c for c in cols if c.get("numeric")] for p, cols in prepared.schema.items()}
    seg = prepared.segments.join(
        prepared.manifest_rows.select("manifest_row_id", "protocol"), on="manifest_row_id",
        how="left").sort("manifest_position")
    out = []
    for mrid, protocol, path, fmt, n, chunks, fp in seg.select(
            "manifest_row_id", "protocol", "path", "format", "row_count", "chunk_rows",
            "fingerprint").iter_rows():
        cols = [c for c in numeric.get(protocol, ()) if mrid not in c.get("missing", ())]
        info = SegmentInfo(
            path=path, format=fmt, row_count=int(n),
            columns=tuple(ColumnInfo(c["name"], str(c["dtype"]), numeric=True) for c in cols),
            chunk_rows=tuple(int(r) for r in chunks), fingerprint=fp)
        out.append((info, str(protocol), [c["name"] for c in cols]))
    return out


_Found = tuple[dict[str, tuple[int, int]], tuple[int, int, float | None, float | None] | None,
               int]


def _profile_segment(storage: Storage, info: SegmentInfo, names: list[str]) -> _Found:
    """``({column: (nulls, non_finite)}, sampling or None, columns counted from the
    footer)`` of one segment."""
    plain = [n for n in names if not any(f in info.column(n).dtype for f in _FLOATING)
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


def profile_version(storage: Storage, prepared: PreparedVersion, *,
                    progress: Callable[[int, int], None] | None = None) -> VersionProfile:
    """Read what needs reading of every segment once and profile the version
    (``progress(done, total)`` after each segment)."""
    segments = _segments(prepared)
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    order = {info.path: k for k, (info, _p, _n) in enumerate(segments)}
    problems: list[tuple[int, SamplingProblem]] = []
    irregular: dict[str, int] = defaultdict(int)
    from_footer = 0

    def work(item: tuple[SegmentInfo, str, list[str]]) -> _Found:
        return _profile_segment(storage, item[0], item[2])

    for done, ((info, protocol, names), (counts, sampling, footer)) in enumerate(batched_map(
            work, segments, workers=workers_for(storage)), start=1):
        if progress is not None:
            progress(done, len(segments))
        from_footer += footer
        for name in names:
            entry = rows[(protocol, name)]
            nulls, inf = counts.get(name, (0, 0))
            entry[0] += info.row_count
            entry[1] += nulls
            entry[2] += inf
        if sampling is not None and (sampling[0] or sampling[1]):
            irregular[protocol] += 1
            gaps, non_mono, median, largest = sampling
            problems.append((order[info.path], SamplingProblem(
                path=info.path, protocol=protocol, rows=info.row_count, gaps=gaps,
                non_monotonic=non_mono, median_step=median, max_step=largest)))
    problems.sort(key=lambda item: item[0])
    columns = [ColumnProfile(protocol=p, column=c, rows=v[0], nulls=v[1], non_finite=v[2])
               for (p, c), v in sorted(rows.items())]
    return VersionProfile(columns=columns, irregular_segments=dict(sorted(irregular.items())),
                          sampling=[p for _k, p in problems[:MAX_LISTED]],
                          null_counts_from_footer=from_footer)


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
