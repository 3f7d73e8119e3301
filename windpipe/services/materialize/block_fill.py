"""Filling a block: its chunks decoded in runs, on a few threads.

A block (:mod:`windpipe.services.materialize.blocks`) is every chunk of one protocol of a plan,
decoded and scaled. Chunk by chunk, a block over many small segments pays per chunk a
``stat``, a footer, an open, a decode and a dozen numpy calls (~0.5 ms for 60 rows), and
a block of large row groups decodes on one core while the others wait. So the chunks,
in block order, are cut into **runs**: consecutive chunks read with one channel spec
whose rows follow each other in the block, up to :data:`RUN_ROWS` rows. A run

* takes the chunks its version's pack holds (:mod:`windpipe.services.storage.packs`: small
  parquet segments, written once by registration) with one gather a column from the
  mapped pack, after one ``stat`` a segment (:func:`_packed`),
* reads each of its other segments' chunks at once
  (:func:`windpipe.services.storage.segments.read_chunks`: a small local parquet file in one
  read, verified from the same bytes),
* converts each column to float64 once for all of them, and scales and lays them out
  in one call straight into the block's rows (:func:`windpipe.services.materialize.chunks.lay_out`).

Runs go to one pool of :data:`FILL_THREADS` threads shared by every fill of the process
(one a core the process may use, ``os.sched_getaffinity``), at most ``2 x threads`` of a
fill's runs in flight, submitted in block order (pyarrow's decoding and numpy's bulk
work release the GIL): a fill behind a stream's read-ahead and the stream's own share
the cores instead of each starting threads of its own. Runs write disjoint rows, so the
block is byte for byte the chunk-by-chunk fill whichever run ends first; progress is reported
in run order. On an object store a run is one chunk. One thread fills, in order:

* a block whose chunks overlap in rows (a later chunk overwrites an earlier one);
* a block of small chunks (under :data:`THREAD_CHUNK_ROWS` rows on average), whose time
  is Python work holding the GIL: threads only contend for it (measured: 2x slower on
  2 cores).

A block read through an object store's read-ahead (``windpipe.services.storage.readahead``)
is decoded on the threads too, one chunk a run: its reads arrive in order and the runs
in flight take them out of order by at most their number
(``ReadAhead.allow_consumers``), so no fetched chunk is dropped because a later one was
taken first (which made threads 12-20% slower than one consumer before).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from windpipe.services.contract.errors import SegmentError
from windpipe.services.materialize.chunks import lay_out, segment_errors
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.planning.sizes import chunk_row_bytes
from windpipe.services.storage.formats.base import SegmentInfo, float64_columns
from windpipe.services.storage.segments import read_ahead, read_chunks
from windpipe.services.storage.store import Storage

if TYPE_CHECKING:
    from windpipe.services.materialize.blocks import BlockLayout

__all__ = ["FILL_THREADS", "RUN_ROWS", "THREAD_CHUNK_ROWS", "Progress", "fill_block"]

RUN_ROWS = 1 << 16  # rows a run lays out at once (a few MiB of float64 columns)


def _cores() -> int:
    """The cores this process may run on (its affinity mask; a container's CPU set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


FILL_THREADS = max(1, min(16, _cores()))
_POOL: list[ThreadPoolExecutor] = []  # the shared fill pool, made on first use
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=FILL_THREADS,
                                            thread_name_prefix="windpipe-fill"))
        return _POOL[0]
_IN_FLIGHT = 2  # a threaded fill's runs in flight, per thread
THREAD_CHUNK_ROWS = 8192  # chunks of fewer rows on average: one thread (GIL-bound Python)

Progress = Callable[[int, int], None]  # (chunks done in this block, bytes decoded)


@dataclass(frozen=True, slots=True)
class _Run:
    """Consecutive chunks ``[first, stop)`` of the block (positions in its chunk list),
    one spec, rows ``[row, row + rows)`` of the block."""

    first: int
    stop: int
    row: int
    rows: int
    spec: int


def fill_block(plan: PlanContext, storage: Storage, layout: BlockLayout, rows: np.ndarray,
               *, progress: Progress | None = None, threads: int = FILL_THREADS) -> int:
    """Decode and scale every chunk of the block into its row matrix ``rows`` (shaped
    ``(R, C_in + C_out)``, :mod:`windpipe.services.materialize.rows`); returns the bytes read from
    storage (decoded float64 bytes of the columns read, as chunk loads count them)."""
    chunks = layout.chunks
    lengths = plan.chunk_len[chunks]
    starts = layout.chunk_row
    overlap = (bool((starts[1:] < starts[:-1] + lengths[:-1]).any()) if lengths.shape[0]
               else False)
    if overlap or lengths.sum() < THREAD_CHUNK_ROWS * lengths.shape[0]:
        threads = 1  # in order; or small chunks, whose Python work holds the GIL
    runs = _runs(plan, layout, lengths, one_chunk=not storage.is_local)
    row_bytes = chunk_row_bytes(layout.c_in, layout.c_out)
    ends = starts + lengths

    def step(done: int) -> None:  # chunks [0, done) of the block are in it
        if progress is not None:
            progress(done, int(ends[done - 1]) * row_bytes)

    ahead = ((plan.piece_info(int(plan.chunk_piece[c])), int(plan.chunk_index[c]),
              plan.variants[int(plan.chunk_spec[c])].read_columns) for c in chunks.tolist())
    read = 0
    with read_ahead(storage, ahead) as fetching:  # an object store's chunks, in this order
        if fetching is not None and threads > 1:
            # runs in flight take their chunks out of order by up to that many reads
            fetching.allow_consumers(_IN_FLIGHT * threads + 1)
        # one thread: progress segment by segment inside a run; threads: run by run
        inner = step if threads <= 1 or len(runs) <= 1 else None
        for run, n in _each(runs, lambda r: _fill_run(plan, storage, layout, r, rows=rows,
                                                      step=inner),
                            threads=threads):
            read += n
            if inner is None:
                step(run.stop)
    return read


def _runs(plan: PlanContext, layout: BlockLayout, rows: np.ndarray, *,
          one_chunk: bool) -> list[_Run]:
    """The block's chunks cut into runs (see the module docstring)."""
    n = int(rows.shape[0])
    if n == 0:
        return []
    spec = plan.chunk_spec[layout.chunks].astype(np.int64)
    starts = layout.chunk_row
    cut = np.ones(n, dtype=bool)
    if not one_chunk:
        cut[1:] = (spec[1:] != spec[:-1]) | (starts[1:] != starts[:-1] + rows[:-1])
    out: list[_Run] = []
    ends = np.cumsum(rows)
    for first, end in itertools.pairwise([*np.flatnonzero(cut).tolist(), n]):
        a = first
        while a < end:  # at most RUN_ROWS rows a run (one chunk may be more)
            base = int(ends[a] - rows[a])
            stop = int(np.searchsorted(ends, base + RUN_ROWS, side="right"))
            stop = min(end, max(stop, a + 1))
            out.append(_Run(first=a, stop=stop, row=int(starts[a]),
                            rows=int(ends[stop - 1]) - base, spec=int(spec[a])))
            a = stop
    return out


def _fill_run(plan: PlanContext, storage: Storage, layout: BlockLayout, run: _Run, *,
              rows: np.ndarray, step: Callable[[int], None] | None) -> int:
    """Read, lay out and copy one run; the bytes read. ``step(done)`` after each segment's
    chunks are read (the run's rows are in the block only when the last step is made).
    Stretches of chunks the version's pack holds (:func:`_packed`) are gathered from it
    with one take a column; the other segments are read."""
    spec = plan.variants[run.spec]
    names = list(spec.read_columns)
    chunks = layout.chunks[run.first:run.stop]
    file, start = _packed(plan, storage, chunks, names)
    parts: list[dict[str, np.ndarray]] = []
    cuts = np.flatnonzero(file[1:] != file[:-1]) + 1
    for a, b in itertools.pairwise([0, *cuts.tolist(), chunks.shape[0]]):
        if file[a] >= 0:
            parts.append(_gather(plan, int(file[a]), start[a:b], plan.chunk_len[chunks[a:b]],
                                 names))
            if step is not None and run.first + b < run.stop:
                step(run.first + b)
        else:
            parts.append(_read(plan, storage, chunks[a:b], names, first=run.first + a,
                               stop=run.stop, step=step))
    data = parts[0] if len(parts) == 1 else {
        name: np.concatenate([part[name] for part in parts]) for name in names}
    lay_out(data, run.rows, spec, out=rows[run.row : run.row + run.rows])
    if step is not None:
        step(run.stop)
    return sum(int(a.nbytes) for a in data.values())


def _packed(plan: PlanContext, storage: Storage, chunks: np.ndarray,
            names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk of ``chunks``: the pack data file that holds its rows (-1: read it) and
    its first row there. A chunk's rows are taken from the pack when its segment is
    packed with the plan's fingerprint in a file holding every column of ``names``, and
    one ``stat`` finds the file as registration read it (windpipe.services.storage.packs)."""
    n = chunks.shape[0]
    packed = plan.packed_pieces
    root = storage.local_root
    if packed is None or plan.packs is None or root is None or not names or not n:
        return np.full(n, -1, dtype=np.int32), np.zeros(n, dtype=np.int64)
    piece = plan.chunk_piece[chunks]
    file = packed.file[piece]
    if (file >= 0).any():
        ok = plan.packs.files_with(frozenset(names))
        file = np.where((file >= 0) & ok[np.maximum(file, 0)], file, -1)
        first = np.flatnonzero(np.diff(piece, prepend=-1) != 0)  # a segment's first chunk
        first = first[file[first] >= 0]
        fresh = packed.unchanged(str(root), plan.streams.piece_path, piece[first])
        stale = piece[first[~fresh]]
        if stale.shape[0]:
            file = np.where(np.isin(piece, stale), -1, file)
    streams = plan.streams
    within = plan.chunk_gstart[chunks] - streams.piece_global_start[piece]
    return file, packed.start[piece] + within


def _gather(plan: PlanContext, file: int, starts: np.ndarray, counts: np.ndarray,
            names: list[str]) -> dict[str, np.ndarray]:
    """The float64 columns of chunks whose rows start at ``starts`` in data file ``file``
    of the pack (one take a column; a slice when they follow each other there)."""
    assert plan.packs is not None
    source = plan.packs.columns(file)
    a = int(starts[0])
    total = int(counts.sum())
    if bool((starts[1:] == starts[:-1] + counts[:-1]).all()):
        return {name: source[name][a:a + total] for name in names}
    offsets = np.cumsum(counts) - counts
    index = np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)
    return {name: source[name][index] for name in names}


def _read(plan: PlanContext, storage: Storage, chunks: np.ndarray, names: list[str], *,
          first: int, stop: int, step: Callable[[int], None] | None) -> dict[str, np.ndarray]:
    """The float64 columns of ``chunks`` read from their segments (positions ``first``
    on of the run ending at ``stop``), ``step`` after each segment."""
    tables: list[pa.Table] = []
    done = first
    for info, idxs in _by_segment(plan, chunks):
        with segment_errors(info, idxs[0]):
            table = read_chunks(storage, info, idxs, names)
        expected = sum(info.chunk_rows[k] for k in idxs)
        if names and table.num_rows != expected:
            raise SegmentError(
                f"segment {info.path!r} chunk {idxs[0]}: {table.num_rows} rows, expected "
                f"{expected} (changed since registration?)",
                details={"path": info.path, "chunk": idxs[0]},
            )
        tables.append(table)
        done += len(idxs)
        if step is not None and done < stop:
            step(done)
    return float64_columns(tables, names)


def _by_segment(plan: PlanContext, chunks: np.ndarray,
                ) -> Iterator[tuple[SegmentInfo, list[int]]]:
    """The chunks of a run grouped by consecutive segment: (segment, chunk indices)."""
    pieces = plan.chunk_piece[chunks].tolist()
    index = plan.chunk_index[chunks].tolist()
    k = 0
    while k < len(pieces):
        info = plan.piece_info(int(pieces[k]))
        j = k + 1
        while j < len(pieces) and plan.piece_info(int(pieces[j])) is info:
            j += 1
        yield info, [int(i) for i in index[k:j]]
        k = j


def _each(runs: list[_Run], work: Callable[[_Run], int], *,
          threads: int) -> Iterator[tuple[_Run, int]]:
    """``work(run)`` of every run, results in run order; on ``threads`` threads with a
    bounded number of runs in flight. The first failure is raised once the runs already
    started have ended (nothing writes into the block after the fill returns)."""
    if threads <= 1 or len(runs) <= 1:
        for run in runs:
            yield run, work(run)
        return
    pending: deque[tuple[_Run, Future[int]]] = deque()
    pool = _pool()
    try:
        for run in runs:
            pending.append((run, pool.submit(work, run)))
            if len(pending) > _IN_FLIGHT * threads:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        for _, future in pending:
            future.cancel()
        for _, future in pending:  # nothing writes into the block after the fill returns
            if not future.cancelled():
                future.exception()

