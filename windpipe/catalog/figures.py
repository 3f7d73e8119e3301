"""A batch of segments' profile figures, counted at once from the values their checks read.

Registration's profile (:mod:`windpipe.catalog.profile`) needs, per segment, the null (or NaN)
and infinity counts of its numeric columns and the sampling of its time column. For a
small parquet file the checks read the whole file to fingerprint its footer (locally,
or held whole from an object store), so the values are decoded from those bytes there
and then (``ParquetFormat.inspect_values``, :func:`values_of_file`) and counted here.

Counting is per batch, not per segment: a collection's segments are a few dozen rows
each, and numpy's cost per call (a few microseconds) would exceed the work. The
segments of a batch that read the same columns are stacked into one array per column
(:func:`count_group`), every count is one pass over it, cut at the segments' offsets,
and the sampling rules run over all their time columns at once
(:func:`sampling_steps`); only a segment found irregular is looked at alone, for the
median and largest step its listing shows (:func:`sampling_problem`, the rules' one
definition). The values are dropped once counted.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from windpipe.services.contract.stats import GAP_FACTOR, TIME_COLUMN
from windpipe.services.storage.formats.parquet import footer_null_counts
from windpipe.services.storage.segments import SegmentInfo, SegmentValues
from windpipe.services.storage.store import Storage

__all__ = ["FLOATING", "Counted", "Sampling", "count_group", "sampling_problem",
           "sampling_steps", "values_of_file"]

FLOATING = ("float", "double", "mixed")  # a schema dtype whose nulls no footer holds

# (gaps, non-monotonic steps, median positive step, largest step)
Sampling = tuple[int, int, float | None, float | None]


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


def sampling_steps(times: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gaps and non-monotonic steps of many time columns at once: segment ``k``'s
    times are ``times[offsets[k]:offsets[k + 1]]``. Per segment the same as
    :func:`sampling_problem`'s first two figures (the same steps, compared the same way):
    steps are taken between a segment's consecutive finite times only, and a step's
    neighbours are its own segment's."""
    count = offsets.shape[0] - 1
    owner = np.repeat(np.arange(count, dtype=np.int64), np.diff(offsets))
    finite = np.isfinite(times)
    t, owner = times[finite], owner[finite]
    within = owner[1:] == owner[:-1]
    d = np.diff(t)[within]
    at = owner[1:][within]
    non_monotonic = np.bincount(at[d <= 0], minlength=count)
    steps = np.bincount(at, minlength=count)
    first = np.ones(d.shape[0], dtype=bool)
    first[1:] = at[1:] != at[:-1]
    last = np.ones(d.shape[0], dtype=bool)
    last[:-1] = first[1:]
    before = np.zeros_like(d)
    before[1:] = d[:-1]
    after = np.zeros_like(d)
    after[:-1] = d[1:]
    left = np.where(first, after, before)  # the first step's one neighbour is the next
    right = np.where(last, before, after)  # the last step's the one before
    near = np.maximum(left, right)
    gap = (steps[at] >= 2) & (np.minimum(left, right) > 0) & (d > GAP_FACTOR * near)
    return np.bincount(at[gap], minlength=count), non_monotonic


class Counted:
    """What :func:`count_group` found in a group of segments reading the same columns:
    ``nan`` and ``inf`` (per column of ``names``, per segment: int64 arrays shaped
    ``(columns, segments)``), when the time column is read, the ``irregular``
    segments (their positions in the group) with their :data:`Sampling`, and the
    stacked ``columns`` themselves (one array per name, every segment's rows, segment
    ``k`` at ``offsets[k]:offsets[k + 1]``; a floating column in its own type, any
    other as float64, null as NaN: what registration's pack takes)."""

    __slots__ = ("columns", "inf", "irregular", "names", "nan", "offsets")

    def __init__(self, names: tuple[str, ...], nan: np.ndarray, inf: np.ndarray,
                 irregular: dict[int, Sampling], *, columns: list[np.ndarray],
                 offsets: np.ndarray) -> None:
        self.names, self.nan, self.inf, self.irregular = names, nan, inf, irregular
        self.columns, self.offsets = columns, offsets


_NUMPY = {pa.float16(): np.float16, pa.float32(): np.float32, pa.float64(): np.float64}


def _floats(array: pa.Array) -> np.ndarray:
    """A floating arrow array as numpy, null as NaN, from its buffers (pyarrow's own
    conversion imports pandas the first time: most of a second of a fresh server's first
    registration)."""
    dtype = np.dtype(_NUMPY[array.type])
    validity, data = array.buffers()[:2]
    start, count = array.offset, len(array)
    values = np.frombuffer(data, dtype=dtype, count=start + count)[start:]
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        values = np.where(bits[start:start + count].astype(bool), values, dtype.type(np.nan))
    return values


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A stacked column (one chunk) as a read of the segment counts it: a floating column
    in its own type (widening keeps every NaN and infinity: the same counts), any other,
    and the time column (its steps), as float64 (null: NaN), as
    :func:`windpipe.services.storage.formats.base.to_float64` reads it."""
    column = table.column(name)
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if (name == TIME_COLUMN or not pa.types.is_floating(array.type)) \
            and not pa.types.is_float64(array.type):
        array = pc.cast(array, pa.float64())
    return _floats(array)


def _per_segment(found: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per row of the boolean matrix ``found``, the count in each segment's columns."""
    running = np.zeros((found.shape[0], found.shape[1] + 1), dtype=np.int64)
    np.cumsum(found, axis=1, out=running[:, 1:])
    return running[:, offsets[1:]] - running[:, offsets[:-1]]


def count_group(tables: Sequence[pa.Table], names: tuple[str, ...]) -> Counted:
    """Count the values of ``tables`` (one a segment, each holding columns ``names`` with
    the same types): NaN (null included) and infinities per column and segment, and the
    time column's sampling. The columns of every segment are stacked into one matrix
    (one table, one chunk a column): a few numpy calls a group, whatever its size."""
    lengths = np.fromiter((t.num_rows for t in tables), dtype=np.int64, count=len(tables))
    offsets = np.zeros(len(tables) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    stacked = (pa.concat_tables(tables) if len(tables) > 1 else tables[0]).combine_chunks()
    columns = [_column(stacked, name) for name in names]
    matrix = np.vstack(columns)  # float32 columns widened beside float64 ones: same counts
    irregular: dict[int, Sampling] = {}
    if TIME_COLUMN in names:
        times = columns[names.index(TIME_COLUMN)]
        gaps, back = sampling_steps(times, offsets)
        for k in np.flatnonzero(gaps + back).tolist():
            irregular[k] = sampling_problem(times[offsets[k]:offsets[k + 1]])
    return Counted(names, _per_segment(np.isnan(matrix), offsets),
                   _per_segment(np.isinf(matrix), offsets), irregular, columns=columns,
                   offsets=offsets)


def values_of_file(storage: Storage, info: SegmentInfo, data: bytes, *,
                   also: Collection[str]) -> SegmentValues | None:
    """The :class:`SegmentValues` of a parquet segment from ``data``, the whole file as the
    check fetched and fingerprinted it (an object fetched in one request,
    :mod:`windpipe.services.storage.held`), chosen as a local file's check chooses them
    (``ParquetFormat.inspect_values``): the footer's null counts of the columns that are
    not floating, and every row of the numeric columns the footer cannot answer for and
    of ``also``. None when the pages do not decode (the profile then reads the segment
    the usual way, which says what is wrong)."""
    numeric = [c for c in info.columns if c.numeric]
    footer = footer_null_counts(storage, info, [c.name for c in numeric if c.name not in also
                                                and not any(f in c.dtype for f in FLOATING)])
    names = [c.name for c in numeric if c.name not in footer]
    if not names or not info.row_count:
        return SegmentValues(footer, pa.table({}))
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(columns=names, use_threads=False)
    except (OSError, pa.ArrowException):
        return None
    return SegmentValues(footer, table)
