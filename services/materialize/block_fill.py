"""Filling a block: its chunks decoded in runs, on a few threads.

A block (:mod:`services.materialize.blocks`) is every chunk of one protocol of a plan,
decoded and scaled. Chunk by chunk, a block over many small segments pays per chunk a
``stat``, a footer, an open, a decode and a dozen numpy calls (~0.5 ms for 60 rows), and
a block of large row groups decodes on one core while the others wait. So the chunks,
in block order, are cut into **runs**: consecutive chunks read with one channel spec
whose rows follow each other in the block, up to :data:`RUN_ROWS` rows. A run

* reads each of its segments' chunks at once
  (:func:`services.storage.segments.read_chunks`: a small local parquet file in one
  read, verified from the same bytes),
* converts each column to float64 once for all of them, and scales and lays them out
  in one call straight into the block's rows (:func:`services.materialize.chunks.lay_out`).

Runs go to up to :data:`FILL_THREADS` threads, submitted in block order (pyarrow's
decoding and numpy's bulk work release the GIL). Runs write disjoint rows, so the block
is byte for byte the chunk-by-chunk fill whichever run ends first; progress is reported
in run order. On an object store a run is one chunk. One thread fills, in order:

* a block whose chunks overlap in rows (a later chunk overwrites an earlier one);
* a block of small chunks (under :data:`THREAD_CHUNK_ROWS` rows on average), whose time
  is Python work holding the GIL: threads only contend for it (measured: 2x slower on
  2 cores);
* a block read through an object store's read-ahead (``services.storage.readahead``):
  its reads arrive in order, and threads taking them (each read a Python call through
  the parquet reader) were 12-20% slower in ``bench.object_store``; without the
  read-ahead (``WINDPIPE_S3_READAHEAD_BYTES=0``) threads halve the fill.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from services.contract.errors import ErrorType, WindpipeError
from services.materialize.chunks import lay_out, segment_errors
from services.materialize.plan import PlanContext
from services.planning.sizes import chunk_row_bytes
from services.storage.formats.base import SegmentInfo, float64_columns
from services.storage.segments import read_ahead, read_chunks
from services.storage.store import Storage

if TYPE_CHECKING:
    from services.materialize.blocks import BlockLayout

__all__ = ["FILL_THREADS", "RUN_ROWS", "THREAD_CHUNK_ROWS", "Progress", "fill_block"]

RUN_ROWS = 1 << 16  # rows a run lays out at once (a few MiB of float64 columns)
FILL_THREADS = max(1, min(3, os.cpu_count() or 1))
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
    ``(R, C_in + C_out)``, :mod:`services.materialize.rows`); returns the bytes read from
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
        if fetching is not None:
            threads = 1  # the read-ahead feeds one consumer in its order best (see above)
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
    Segments whose rows the version's pack holds (:mod:`services.storage.packs`) are
    taken from it, consecutive ones with one gather a column; the others are read."""
    spec = plan.variants[run.spec]
    names = list(spec.read_columns)
    columns = _RunColumns(plan, storage, names)
    done = run.first
    for info, idxs in _by_segment(plan, layout.chunks[run.first:run.stop]):
        done += len(idxs)
        if columns.packed(info, idxs):
            continue
        with segment_errors(info, idxs[0]):
            table = read_chunks(storage, info, idxs, names)
        expected = sum(info.chunk_rows[k] for k in idxs)
        if names and table.num_rows != expected:
            raise WindpipeError(
                ErrorType.SEGMENT_ERROR,
                f"segment {info.path!r} chunk {idxs[0]}: {table.num_rows} rows, expected "
                f"{expected} (changed since registration?)",
                details={"path": info.path, "chunk": idxs[0]},
            )
        columns.read(table)
        if step is not None and done < run.stop:
            step(done)
    data = columns.columns()
    lay_out(data, run.rows, spec, out=rows[run.row : run.row + run.rows])
    if step is not None:
        step(run.stop)
    return sum(int(a.nbytes) for a in data.values())


class _RunColumns:
    """A run's float64 columns in block order, from the tables its reads returned and
    from the version's pack: consecutive read tables converted at once
    (:func:`float64_columns`), consecutive packed segments of one data file gathered at
    once. A plan without a pack, or a root that is not local, packs nothing."""

    def __init__(self, plan: PlanContext, storage: Storage, names: list[str]) -> None:
        root = storage.local_root
        self._pack = plan.packs if root is not None and names else None
        self._root = str(root)
        self._names = names
        self._wanted = frozenset(names)
        self._parts: list[dict[str, np.ndarray]] = []
        self._tables: list[pa.Table] = []
        self._file = -1
        self._starts: list[int] = []
        self._counts: list[int] = []

    def packed(self, info: SegmentInfo, chunks: list[int]) -> bool:
        """Take chunks ``chunks`` of ``info`` from the pack; False: read them."""
        if self._pack is None:
            return False
        found = self._pack.find(self._root, info, self._wanted)
        if found is None:
            return False
        self._flush_tables()
        if self._starts and found[0] != self._file:
            self._flush_pack()
        self._file, first = found
        if len(chunks) == len(info.chunk_rows) and chunks == sorted(chunks):
            self._starts.append(first)
            self._counts.append(info.row_count)
        else:
            starts = info.chunk_starts
            for k in chunks:
                self._starts.append(first + int(starts[k]))
                self._counts.append(int(info.chunk_rows[k]))
        return True

    def read(self, table: pa.Table) -> None:
        """The next segment's chunks, as read."""
        self._flush_pack()
        self._tables.append(table)

    def columns(self) -> dict[str, np.ndarray]:
        """Every column of the run, its parts in order."""
        self._flush_tables()
        self._flush_pack()
        parts = self._parts
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([part[name] for part in parts])
                for name in self._names} if parts else {}

    def _flush_tables(self) -> None:
        if self._tables:
            self._parts.append(float64_columns(self._tables, self._names))
            self._tables = []

    def _flush_pack(self) -> None:
        if not self._starts or self._pack is None:
            return
        source = self._pack.columns(self._file)
        starts = np.asarray(self._starts, dtype=np.int64)
        counts = np.asarray(self._counts, dtype=np.int64)
        self._starts, self._counts = [], []
        if starts.shape[0] == 1:
            a, n = int(starts[0]), int(counts[0])
            self._parts.append({name: source[name][a:a + n] for name in self._names})
            return
        offsets = np.cumsum(counts) - counts
        index = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()),
                                                                 dtype=np.int64)
        self._parts.append({name: source[name][index] for name in self._names})


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
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="windpipe-fill") as pool:
        try:
            for run in runs:
                pending.append((run, pool.submit(work, run)))
                if len(pending) > 2 * threads:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()
        finally:
            for _, future in pending:
                future.cancel()

