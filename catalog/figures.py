"""A segment's profile figures, taken while registration's checks hold its bytes.

Registration's profile (:mod:`catalog.profile`) needs, per segment, the null (or NaN)
and infinity counts of its numeric columns and the sampling of its time column. For a
small local parquet file the checks read the whole file to fingerprint its footer
(:func:`services.storage.segments.inspect_segment_values`), so the figures are taken
from those bytes there and then (:func:`figures_of`: a few counts kept, the values
dropped), and the profile aggregates them without opening the segment again.

What the profile counts depends on the version's schema, known only once every segment
is checked (a column's type across the protocol's segments), so the figures keep what
either rule may ask for: the footer's null counts and the counts of every column read;
:func:`found_from` answers a segment's figures under the profile's rules, or None when
they lack something (the profile then reads that segment as before).
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from services.contract.stats import GAP_FACTOR, TIME_COLUMN
from services.storage.formats.base import to_float64
from services.storage.formats.parquet import footer_null_counts
from services.storage.segments import SegmentInfo, SegmentValues
from services.storage.store import Storage

__all__ = ["FLOATING", "Found", "Sampling", "SegmentFigures", "figures_of", "found_from",
           "sampling_problem", "values_of_file"]

FLOATING = ("float", "double", "mixed")  # a schema dtype whose nulls no footer holds

# (gaps, non-monotonic steps, median positive step, largest step)
Sampling = tuple[int, int, float | None, float | None]
# ({column: (nulls, non_finite)}, sampling or None, columns counted from the footer)
Found = tuple[dict[str, tuple[int, int]], Sampling | None, int]


@dataclass(frozen=True, slots=True)
class SegmentFigures:
    """The profile figures of one segment: ``footer_nulls`` (the footer's null counts, per
    numeric column counted in every row group), ``read`` (``(NaN or null, +-inf)`` counts
    of the columns read), ``sampling`` (of the time column, when read)."""

    footer_nulls: dict[str, int]
    read: dict[str, tuple[int, int]]
    sampling: Sampling | None


def sampling_problem(times: np.ndarray) -> Sampling:
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
    positive = np.sort(d[d > 0])  # the median as np.median computes it, without its overhead
    half = positive.shape[0] // 2
    median = (None if not positive.shape[0] else float(positive[half]) if positive.shape[0] % 2
              else (float(positive[half - 1]) + float(positive[half])) / 2)
    return gaps, non_monotonic, median, float(d.max())


def figures_of(values: SegmentValues) -> SegmentFigures:
    """The counts of ``values`` (the values are not kept), as a read of the segment counts
    them: NaN (null included) and infinities of the float64 column. A floating column is
    taken in its own type (widening keeps every NaN and infinity: the same counts); any
    other, and the time column (its steps), as float64. The columns are counted in one
    stacked array: a handful of numpy calls a segment, whatever its columns."""
    names = [sys.intern(name) for name in values.columns]  # one string a column name, kept
    footer = {sys.intern(name): n for name, n in values.footer_nulls.items()}  # by every segment
    sampling = None
    if not names:
        return SegmentFigures(footer_nulls=footer, read={}, sampling=None)
    arrays = []
    for name in names:
        column = values.columns[name]
        if name == TIME_COLUMN or not pa.types.is_floating(column.type):
            a = to_float64(column)
            if name == TIME_COLUMN:
                sampling = sampling_problem(a)
        else:
            a = (column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
                 ).to_numpy(zero_copy_only=False)
        arrays.append(a)
    stacked = np.vstack(arrays)
    nan = np.count_nonzero(np.isnan(stacked), axis=1).tolist()
    inf = np.count_nonzero(np.isinf(stacked), axis=1).tolist()
    read = {name: (int(n), int(i)) for name, n, i in zip(names, nan, inf, strict=True)}
    return SegmentFigures(footer_nulls=footer, read=read, sampling=sampling)


def values_of_file(storage: Storage, info: SegmentInfo, data: bytes, *,
                   also: Collection[str]) -> SegmentValues | None:
    """The :class:`SegmentValues` of a parquet segment from ``data``, the whole file as the
    check fetched and fingerprinted it (an object fetched in one request,
    :mod:`services.storage.held`), chosen as a local file's check chooses them
    (``ParquetFormat.inspect_values``): the footer's null counts, and every row of the
    numeric columns the footer cannot answer for (floating ones, those without null
    counts) and of ``also``. None when the pages do not decode (the profile then reads the
    segment the usual way, which says what is wrong)."""
    numeric = [c for c in info.columns if c.numeric]
    footer = footer_null_counts(storage, info, [c.name for c in numeric])
    names = [c.name for c in numeric if c.name in also or c.name not in footer
             or any(f in c.dtype for f in FLOATING)]
    if not names or not info.row_count:
        return SegmentValues(footer, {})
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(columns=names, use_threads=False)
    except (OSError, pa.ArrowException):
        return None
    return SegmentValues(footer, {name: table.column(name) for name in names})


def found_from(figures: SegmentFigures, info: SegmentInfo, names: list[str]) -> Found | None:
    """What the profile finds in the segment ``info`` (its columns typed as the version's
    schema types them) for columns ``names``, by the rules of a read: a column neither
    floating nor the time column is counted from the footer when the footer counts it,
    any other is read (nothing read in a segment without rows). None when the figures
    lack a count those rules need."""
    counts: dict[str, tuple[int, int]] = {}
    footer = 0
    for name in names:
        plain = name != TIME_COLUMN and not any(f in info.column(name).dtype for f in FLOATING)
        if plain and name in figures.footer_nulls:
            counts[name] = (figures.footer_nulls[name], 0)
            footer += 1
        elif info.row_count:
            if name not in figures.read:
                return None
            counts[name] = figures.read[name]
    sampling = None
    if TIME_COLUMN in names and info.row_count:
        if figures.sampling is None:
            return None
        sampling = figures.sampling
    return counts, sampling, footer
