"""Statistics of one side of a split (SEMANTICS 6a): computed once, stored, answered again.

:func:`split_stats` answers ``POST /v1/splits/{id}/stats``. The split's assignments
say which manifest rows are on the side; only their segments are opened, each once,
for the requested numeric columns it has (a manifest row lacking a column, SEMANTICS
5a, is counted in ``absent_rows`` and not read). Nothing of the other side is read,
so statistics of ``train`` cannot leak validation rows.

The work is bounded before a segment is read: the index knows the rows of every
manifest row, so the memory the request holds (``WINDPIPE_MAX_STATS_BYTES``: every
finite value of its columns, float32 where the column is float32 in every segment,
else float64) is checked first. Reading streams over the segments on a few threads
(decoding releases the GIL), each segment's columns once; the finite values are
copied into one preallocated array per protocol and column, nulls (null or NaN) and
+-inf counted on the way. Then each array is summarized once, vectorized: min, max,
mean and population std in float64 (two passes over blocks), exact quantiles
(``numpy.quantile``'s ``linear`` rule over the order statistics, found with one
partition) and a fixed-bin histogram over ``[min, max]``.

The result is stored keyed by split, side and columns (``split_stats``), so the same
request again is a read of one row.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
from sqlalchemy.exc import IntegrityError

from windpipe.catalog.context import CatalogContext
from windpipe.catalog.limits import check_stats_bytes
from windpipe.catalog.profile import bounded_map
from windpipe.catalog.repository import Repository
from windpipe.catalog.retire import check_split_live
from windpipe.catalog.service import (
    Created,
    get_split,
    get_version,
    split_index,
    version_segments,
)
from windpipe.services.contract.errors import InvalidRequest
from windpipe.services.contract.stats import (
    HISTOGRAM_BINS,
    QUANTILES,
    ColumnStats,
    Histogram,
    SplitStatsData,
    StatsRequest,
)
from windpipe.services.database import session_scope
from windpipe.services.storage.segments import ColumnInfo, SegmentInfo, read_rows
from windpipe.services.storage.store import Storage, open_root

__all__ = ["columns_key", "split_stats", "stored_split_stats", "summarize"]

_WORKERS = 4
_BLOCK = 1 << 20  # values per block of the float64 passes (8 MiB of temporaries)
# source types whose every value a float32 holds exactly (others are kept as float64)
_FLOAT32_EXACT = frozenset({"float", "halffloat", "bool", "int8", "int16", "uint8", "uint16"})


def columns_key(columns: tuple[str, ...] | None) -> str:
    """``*`` for every numeric column, else a digest of the sorted names."""
    if columns is None:
        return "*"
    raw = json.dumps(sorted(columns), separators=(",", ":")).encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def stored_split_stats(ctx: CatalogContext, split_id: str, request: StatsRequest,
                       ) -> SplitStatsData | None:
    """The statistics stored for this split, side and columns, if they were computed."""
    with session_scope(ctx.sessions) as session:
        body = Repository(session).get_split_stats(split_id, request.side,
                                                   columns_key(request.columns))
    return None if body is None else SplitStatsData.model_validate(body)


def split_stats(ctx: CatalogContext, split_id: str, request: StatsRequest,
                ) -> Created[SplitStatsData]:
    """The statistics of one side of a split: the stored ones, else computed and stored
    (``created``). A retired split is ``conflict``; an unknown or non-numeric column is
    ``invalid_request``; a request above ``max_stats_bytes`` is refused unread."""
    split = get_split(ctx, split_id)
    check_split_live(ctx.sessions, split_id)
    stored = stored_split_stats(ctx, split_id, request)
    if stored is not None:
        return Created(stored, created=False)
    version = get_version(ctx, split.version_id)
    work = _Work.plan(version.schema, split_index(ctx, split_id),
                      version_segments(ctx, version.id), request)
    check_stats_bytes(work.nbytes, ctx.limits, side=request.side)
    started = time.perf_counter()
    work.read(open_root(version.root_uri, ctx.storage))
    stats = SplitStatsData(
        split_id=split_id, version_id=version.id, side=request.side,
        columns=None if request.columns is None else list(request.columns),
        rows=work.rows, stats=[entry for _t, entry in bounded_map(
            summarize, work.targets, workers=_WORKERS)],  # numpy releases the GIL
        seconds=round(time.perf_counter() - started, 6),
    )
    try:
        with session_scope(ctx.sessions) as session:
            Repository(session).add_split_stats(split_id, request.side,
                                                columns_key(request.columns),
                                                stats.model_dump(mode="json"))
    except IntegrityError:  # computed at the same time by another request: theirs
        again = stored_split_stats(ctx, split_id, request)
        if again is not None:
            return Created(again, created=False)
        raise
    return Created(stats, created=True)


@dataclass
class _Target:
    """One protocol's column: its finite values so far and its counts."""

    protocol: str
    column: str
    rows: int
    absent_rows: int
    dtype: type[np.floating[Any]]
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    filled: int = 0
    nulls: int = 0
    non_finite: int = 0

    @property
    def nbytes(self) -> int:
        """The memory its values need at most (every row finite)."""
        return self.rows * np.dtype(self.dtype).itemsize

    def add(self, values: np.ndarray) -> None:
        """Count one segment's values and keep the finite ones."""
        n = int(values.shape[0])
        finite = np.isfinite(values)
        k = int(np.count_nonzero(finite))
        if k == n:
            self.values[self.filled:self.filled + n] = values
        else:
            self.values[self.filled:self.filled + k] = values[finite]
            nan = int(np.count_nonzero(np.isnan(values)))
            self.nulls += nan
            self.non_finite += n - k - nan
        self.filled += k


@dataclass
class _Work:
    """What one request reads: the targets and, per segment, its columns."""

    targets: list[_Target]
    reads: list[tuple[SegmentInfo, list[_Target]]]
    rows: int
    nbytes: int = field(default=0)

    @classmethod
    def plan(cls, schema: dict[str, Any], index: pl.DataFrame, segments: pl.DataFrame,
             request: StatsRequest) -> _Work:
        side = index.filter(pl.col("split") == request.side).select(
            "manifest_row_id", "protocol", "row_count")
        wanted = _wanted_columns(schema, request.columns)
        targets: dict[tuple[str, str], _Target] = {}
        missing: dict[tuple[str, str], frozenset[int]] = {}
        rows = 0
        for protocol in sorted(set(side.get_column("protocol").to_list()) & set(wanted)):
            mine = side.filter(pl.col("protocol") == protocol)
            ids = mine.get_column("manifest_row_id").to_numpy()
            counts = mine.get_column("row_count").to_numpy()
            total = int(counts.sum())
            rows += total
            for entry in wanted[protocol]:
                lack = frozenset(int(m) for m in entry.get("missing", ()))
                absent = int(counts[np.isin(ids, list(lack))].sum()) if lack else 0
                dtype = np.float32 if entry["dtype"] in _FLOAT32_EXACT else np.float64
                key = (protocol, entry["name"])
                missing[key] = lack
                targets[key] = _Target(protocol, entry["name"], total - absent, absent, dtype)
        reads: list[tuple[SegmentInfo, list[_Target]]] = []
        by_protocol: dict[str, list[_Target]] = {}
        for (p, _c), t in sorted(targets.items()):
            by_protocol.setdefault(p, []).append(t)
        chosen = segments.join(side.select("manifest_row_id", "protocol"),
                               on="manifest_row_id", how="inner")
        for mrid, protocol, path, fmt, n, chunks, fp in chosen.select(
                "manifest_row_id", "protocol", "path", "format", "row_count", "chunk_rows",
                "fingerprint").iter_rows():
            mine_t = [t for t in by_protocol.get(protocol, ())
                      if mrid not in missing[(protocol, t.column)]]
            if not mine_t or not n:
                continue
            info = SegmentInfo(
                path=path, format=fmt, row_count=int(n),
                columns=tuple(ColumnInfo(t.column, "double", numeric=True) for t in mine_t),
                chunk_rows=tuple(int(r) for r in chunks), fingerprint=fp)
            reads.append((info, mine_t))
        out = cls(targets=[targets[k] for k in sorted(targets)], reads=reads, rows=rows)
        out.nbytes = sum(t.nbytes for t in out.targets)
        return out

    def read(self, storage: Storage) -> None:
        """Allocate the values (after the bound was checked), read every segment once (a
        few at a time) and feed its columns' targets."""
        for t in self.targets:
            t.values = np.empty(t.rows, dtype=t.dtype)
        def columns(item: tuple[SegmentInfo, list[_Target]]) -> dict[str, np.ndarray]:
            info, targets = item
            return read_rows(storage, info, 0, info.row_count, [t.column for t in targets])

        for (_info, targets), arrays in bounded_map(columns, self.reads, workers=_WORKERS):
            for t in targets:
                t.add(arrays[t.column])


def _wanted_columns(schema: dict[str, Any], columns: tuple[str, ...] | None,
                    ) -> dict[str, list[dict[str, Any]]]:
    """Per protocol, the schema entries of the numeric columns asked for."""
    numeric = {p: [c for c in cols if c.get("numeric")] for p, cols in schema.items()}
    if columns is None:
        return {p: cols for p, cols in numeric.items() if cols}
    known = {c["name"] for cols in schema.values() for c in cols}
    have = {c["name"] for cols in numeric.values() for c in cols}
    unknown = [c for c in columns if c not in known]
    plain = [c for c in columns if c in known and c not in have]
    if unknown or plain:
        what = f"unknown column(s) {unknown}" if unknown else f"non-numeric column(s) {plain}"
        raise InvalidRequest(
            f"statistics of {what}: the version's numeric columns are {sorted(have)}",
            details={"unknown": unknown, "non_numeric": plain, "columns": sorted(have)})
    picked = {p: [c for c in cols if c["name"] in columns] for p, cols in numeric.items()}
    return {p: cols for p, cols in picked.items() if cols}


def summarize(target: _Target) -> ColumnStats:
    """One target's statistics from its finite values (reordered in place)."""
    base: dict[str, Any] = {
        "protocol": target.protocol, "column": target.column, "rows": target.rows,
        "absent_rows": target.absent_rows, "count": target.filled, "nulls": target.nulls,
        "non_finite": target.non_finite,
    }
    v = target.values[:target.filled]
    if v.shape[0] == 0:
        return ColumnStats(**base)
    p1, p50, p99 = _quantiles(v, QUANTILES)  # partitions v in place: order-free stats next
    lo, hi = float(v.min()), float(v.max())
    mean, std = _moments(v)
    return ColumnStats(**base, min=lo, max=hi, mean=mean, std=std, p1=p1, p50=p50, p99=p99,
                       histogram=_histogram(v, lo, hi))


def _quantiles(v: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``numpy.quantile(v, qs)`` (method ``linear``) in float64 from the exact order
    statistics: one in-place partition, whatever the buffer's dtype."""
    n = int(v.shape[0])
    pos = [(n - 1) * q for q in qs]  # numpy's virtual index (method linear)
    below = [max(0, min(math.floor(h), n - 1)) for h in pos]
    kth = sorted({k for b in below for k in (b, min(b + 1, n - 1))})
    v.partition(kth)
    out = []
    for h, b in zip(pos, below, strict=True):
        a, c, t = float(v[b]), float(v[min(b + 1, n - 1)]), h - b
        diff = c - a
        out.append(c - diff * (1.0 - t) if t >= 0.5 else a + diff * t)  # numpy's _lerp
    return out


def _moments(v: np.ndarray) -> tuple[float, float]:
    """Mean and population std in float64, two passes over blocks of the values."""
    n = int(v.shape[0])
    total = math.fsum(float(v[i:i + _BLOCK].sum(dtype=np.float64))
                      for i in range(0, n, _BLOCK))
    mean = total / n
    square = 0.0
    for i in range(0, n, _BLOCK):
        d = v[i:i + _BLOCK].astype(np.float64)
        d -= mean
        d *= d
        square += float(d.sum())
    return mean, math.sqrt(square / n)


def _histogram(v: np.ndarray, lo: float, hi: float) -> Histogram:
    """:data:`HISTOGRAM_BINS` equal bins over ``[lo, hi]`` (one bin for a constant)."""
    if lo == hi:
        return Histogram(edges=[lo, hi], counts=[int(v.shape[0])])
    counts, edges = np.histogram(v, bins=HISTOGRAM_BINS, range=(lo, hi))
    return Histogram(edges=[float(e) for e in edges], counts=[int(c) for c in counts])
