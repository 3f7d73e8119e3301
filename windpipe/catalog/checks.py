"""A registration's segment checks: every segment opened, fingerprinted and described, and
the values of a small parquet file counted from the same bytes, in batches.

On a local root, segments go to :data:`LOCAL_WORKERS` threads in batches of
:data:`LOCAL_BATCH` (:func:`windpipe.catalog.batched.batched_map`, results in manifest order). A
batch opens its files below directories opened once and never through a link
(:class:`windpipe.services.storage.beneath.Beneath`), parses each footer from the one read and
decodes a small file's numeric columns from the same bytes
(``ParquetFormat.inspect_values``); the decoding and parsing are pyarrow's, which
releases the interpreter lock, so two threads overlap them. The batch's values are
then counted at once and summed into a :class:`windpipe.catalog.tally.FigureTally` on the same
thread; the stacked columns of the files read whole go to the registration's pack
(:mod:`windpipe.services.storage.packs`), when it writes one, and are dropped: what comes back
to the registration is a description a segment and the sums. A segment the fast path
does not decide (a link in its path, a file that is not a parquet file, any error) is
checked the usual way
(:func:`windpipe.services.storage.segments.inspect_segment_values`), which says what is wrong.

On an object store, parquet segments are fetched ahead one request each
(:func:`windpipe.catalog.batched.prefetched_map`) and checked from what was fetched; the others
(zarr groups, unnamed files) on :data:`windpipe.catalog.batched.REMOTE_WORKERS` threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import TypeVar

import numpy as np
import polars as pl

from windpipe.catalog.batched import BATCH, REMOTE_BATCH, batched_map, prefetched_map
from windpipe.catalog.described import Described
from windpipe.catalog.figures import Counted, values_of_file
from windpipe.catalog.tally import FigureTally, Keep
from windpipe.services.contract.errors import SegmentError
from windpipe.services.contract.stats import TIME_COLUMN
from windpipe.services.storage.beneath import Beneath
from windpipe.services.storage.formats.parquet import PARQUET
from windpipe.services.storage.packs import PackWriter
from windpipe.services.storage.segments import (
    SMALL_FILE_BYTES,
    SegmentInfo,
    SegmentValues,
    inspect_segment_values,
)
from windpipe.services.storage.store import Storage

__all__ = ["LOCAL_BATCH", "LOCAL_WORKERS", "check_segments"]

LOCAL_BATCH = 128
LOCAL_WORKERS = 2
_PARQUET_NAMES = (".parquet", ".pq")  # named parquet: no marker to look for first
_TAIL_BYTES = 64 << 10
_ALSO = (TIME_COLUMN,)

Found = tuple[SegmentInfo, SegmentValues | None] | str
Job = tuple[list[int], list[str], list[str]]  # indices, paths, protocols of one batch
T = TypeVar("T")


def _inspect(storage: Storage, path: str) -> Found:
    """The segment's description and the values of the bytes read for it (None: not a
    small parquet file read whole), or its problem's text (the exception, its traceback
    and what that holds are dropped here)."""
    try:
        info, values = inspect_segment_values(storage, path, also=_ALSO)
    except SegmentError as exc:
        return exc.message
    held = storage.held(info.path) if values is None else None
    if held is not None and held.whole and info.format == "parquet":
        values = values_of_file(storage, info, held.tail, also=_ALSO)
    return info, values


def _checked(job: Job, found: list[Found], *, keep: Keep | None = None,
             ) -> tuple[list[tuple[int, SegmentInfo | str]], FigureTally]:
    """The descriptions of a batch and its figures, counted (the values dropped once
    ``keep`` was given each group's columns)."""
    indices, _paths, protocols = job
    tally = FigureTally()
    tally.add_batch(indices, protocols, [None if isinstance(f, str) else f for f in found],
                    keep=keep)
    return [(k, f if isinstance(f, str) else f[0]) for k, f in zip(indices, found,
                                                                   strict=True)], tally


def _local_batch(storage: Storage, job: Job, *, pack: PackWriter | None = None,
                 ) -> tuple[list[tuple[int, SegmentInfo | str]], FigureTally]:
    """Check one batch of a local root (see the module docstring); the rows of the small
    files read whole go to ``pack``."""
    root = storage.local_root
    assert root is not None
    found: list[Found] = []
    whole: dict[str, tuple[int, str]] = {}  # path -> size and token of a file read whole
    with Beneath(root) as below:
        for path in job[1]:
            item: Found | None = None
            if path.endswith(_PARQUET_NAMES):
                try:
                    read = below.read(path, nbytes=_TAIL_BYTES, whole_up_to=SMALL_FILE_BYTES)
                    if read is not None:
                        item = PARQUET.inspect_values(storage, path, max_bytes=SMALL_FILE_BYTES,
                                                      also=_ALSO, read=read)
                        if item[1] is not None:
                            whole[path] = (read[0], read[1])
                except Exception:  # the usual path below says what is wrong
                    item = None
            found.append(_inspect(storage, path) if item is None else item)
    keep: Keep | None = None
    if pack is not None and whole:
        def keep(infos: Sequence[SegmentInfo], counted: Counted) -> None:
            reads = [(info, *whole[info.path]) if info.path in whole else None
                     for info in infos]
            pack.add_columns(reads, counted.names, counted.columns, counted.offsets)
    return _checked(job, found, keep=keep)


def _jobs(paths: pl.Series, protocols: pl.Series, indices: np.ndarray,
          size: int) -> Iterator[Job]:
    """The batches of segments ``indices``: their paths and protocols as Python strings
    only while the batch is made and checked (a collection's are a polars column)."""
    for start in range(0, indices.shape[0], size):
        chunk = indices[start:start + size]
        first, count = int(chunk[0]), chunk.shape[0]
        if int(chunk[-1]) - first == count - 1:  # a run (a local root's batches): a slice
            yield (chunk.tolist(), paths.slice(first, count).to_list(),
                   protocols.slice(first, count).to_list())
        else:
            yield (chunk.tolist(), paths.gather(chunk).to_list(),
                   protocols.gather(chunk).to_list())


def _each(paths: pl.Series, indices: np.ndarray) -> Iterator[str]:
    for start in range(0, indices.shape[0], 4096):
        yield from paths.gather(indices[start:start + 4096]).to_list()


def _grouped(pairs: Iterator[tuple[str, Found]], job_of: Iterator[Job],
             ) -> Iterator[tuple[list[tuple[int, SegmentInfo | str]], FigureTally]]:
    """Per-segment results regrouped into their batches (in order), each counted."""
    for job in job_of:
        found = [f for _path, f in islice(pairs, len(job[0]))]
        if not found:
            return
        cut = (job[0][:len(found)], job[1][:len(found)], job[2][:len(found)])
        yield _checked(cut, found)
        if len(found) < len(job[0]):
            return


def check_segments(
    storage: Storage, paths: pl.Series, protocols: pl.Series, *,
    progress: Callable[[int, int], None] | None, stop_after: int, workers: int,
    requests: int, pack: PackWriter | None = None,
) -> tuple[Described, FigureTally]:
    """Check ``paths`` (normalized, distinct; ``protocols[k]`` the protocol of segment
    ``k``): their descriptions and problems, and the figures of their values. No new
    batch is started once ``stop_after`` have failed (the segments not started are
    missing from the answer). ``progress(done, total)`` after each batch;
    ``workers``: the threads (local: batches of :data:`LOCAL_BATCH`; object store:
    segments other than parquet); ``requests``: on an object store, the parquet
    segments' requests in flight at once (0: none fetched ahead); ``pack``: where a
    local root's small files' rows go (:mod:`windpipe.services.storage.packs`)."""
    count = paths.len()
    described = Described(count)
    tally = FigureTally()

    def stop() -> bool:
        return len(described.problems) >= stop_after

    def local(job: Job) -> tuple[list[tuple[int, SegmentInfo | str]], FigureTally]:
        return _local_batch(storage, job, pack=pack)

    def one(path: str) -> Found:
        return _inspect(storage, path)

    batches: Iterable[tuple[list[tuple[int, SegmentInfo | str]], FigureTally]]
    if storage.is_local:
        jobs = _jobs(paths, protocols, np.arange(count), LOCAL_BATCH)
        batches = (r for _job, r in batched_map(local, jobs, workers=max(1, workers), batch=1,
                                                stop=stop))
    else:
        named = (paths.str.ends_with(_PARQUET_NAMES[0]) | paths.str.ends_with(_PARQUET_NAMES[1])
                 if requests > 0 else pl.repeat(value=False, n=count, eager=True))
        ahead = named.arg_true().to_numpy().astype(np.int64)
        rest = (~named).arg_true().to_numpy().astype(np.int64)
        fetched = prefetched_map(_inspect, storage, _each(paths, ahead), requests=requests,
                                 stop=stop)
        others = batched_map(one, _each(paths, rest), workers=max(1, workers), batch=BATCH,
                             stop=stop)
        batches = chain(_grouped(fetched, _jobs(paths, protocols, ahead, REMOTE_BATCH)),
                        _grouped(others, _jobs(paths, protocols, rest, BATCH)))
    for results, part in batches:
        described.add_batch(results)
        tally.merge(part)
        if progress is not None:
            progress(described.done, count)
    return described, tally
