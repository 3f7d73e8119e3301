"""Normalized segments: one parquet file or one zarr v3 group holding rows of one stream.

Every format is a small module of :mod:`windpipe.services.storage.formats`, chosen from its
``FORMATS`` table by name (a registered segment's ``format``) or by path
(:func:`segment_format`); this module adds what every format shares: path checks,
the column checks, the error wrapping and the re-verification after a failed read.

``chunk_rows`` are the natural read units: parquet row groups, zarr chunks (or
shards) along axis 0. The Flight server caches decoded chunks from
:func:`read_chunk`, which always returns float64 with NaN for null.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import numpy as np
import pyarrow as pa

from windpipe.services.arrow_values import from_numpy
from windpipe.services.contract.errors import ErrorType, SegmentChanged, SegmentError, WindpipeError
from windpipe.services.logging import get_logger
from windpipe.services.storage.formats import FORMATS as FORMATS_BY_NAME
from windpipe.services.storage.formats import format_named, format_of_path
from windpipe.services.storage.formats.base import (
    ColumnInfo,
    SegmentFormat,
    SegmentInfo,
    segment_changed,
    segment_problem,
    to_float64,
)
from windpipe.services.storage.formats.parquet import (
    ParquetFormat,
    SegmentValues,
    footer_null_counts,
    read_small_chunks,
)
from windpipe.services.storage.readahead import AheadRead, ReadAhead
from windpipe.services.storage.store import PathEscapeError, Storage
from windpipe.services.storage.zarr_chunks import ChunkFileChanged
from windpipe.services.timings import STORAGE_READ_ERRORS, STORAGE_READS

__all__ = [
    "SMALL_FILE_BYTES",
    "ColumnInfo",
    "SegmentChanged",
    "SegmentError",
    "SegmentFormat",
    "SegmentInfo",
    "SegmentValues",
    "inspect_segment",
    "inspect_segment_values",
    "read_ahead",
    "read_all",
    "read_chunk",
    "read_chunks",
    "read_rows",
    "segment_format",
    "unread_null_counts",
    "verify_segment",
]

_log = get_logger("windpipe.storage")
SMALL_FILE_BYTES = 4 << 20  # a local parquet segment up to this size is read in one go
T = TypeVar("T")


@contextmanager
def _measured(op: str, storage: Storage) -> Iterator[None]:
    """Time one read of ``op`` (``windpipe_storage_read_seconds``, process-wide:
    :mod:`windpipe.services.timings`) and count it by error type if it fails; once per
    chunk or segment, never per row."""
    store = "file" if storage.is_local else "s3"
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        kind = exc.type.value if isinstance(exc, WindpipeError) else "internal"
        STORAGE_READ_ERRORS.inc((op, store, kind))
        raise
    finally:
        STORAGE_READS.observe((op, store), time.perf_counter() - started)


def segment_format(storage: Storage, path: str) -> SegmentFormat:
    """``zarr`` for ``*.zarr`` paths or directories holding a ``zarr.json``, else ``parquet``."""
    return format_of_path(storage, path).name


def inspect_segment(storage: Storage, path: str) -> SegmentInfo:
    """Open a segment, check it and describe it; :class:`SegmentError` on any defect."""
    return _checked(storage, path, lambda rel: format_of_path(storage, rel).inspect(storage, rel))


def inspect_segment_values(storage: Storage, path: str, *, also: Collection[str] = (),
                           ) -> tuple[SegmentInfo, SegmentValues | None]:
    """:func:`inspect_segment`, and from the same one read, the values of a local parquet
    file of at most :data:`SMALL_FILE_BYTES` (:meth:`ParquetFormat.inspect_values`:
    the footer's null counts, every row of the numeric columns it cannot answer for and
    of ``also``); None for any other segment. Registration profiles the values this way
    instead of reading every segment a second time."""

    def inspect(rel: str) -> tuple[SegmentInfo, SegmentValues | None]:
        fmt = format_of_path(storage, rel)
        if isinstance(fmt, ParquetFormat):
            return fmt.inspect_values(storage, rel, max_bytes=SMALL_FILE_BYTES, also=also)
        return fmt.inspect(storage, rel), None

    return _checked(storage, path, inspect)


def _checked(storage: Storage, path: str, inspect: Callable[[str], T]) -> T:
    """``inspect(rel)`` of the validated path, any failure a :class:`SegmentError` (but
    an unavailable store, which is retried later)."""
    try:
        rel = storage.validate_relative_path(path)
    except PathEscapeError as exc:
        raise segment_problem(str(exc), path=path) from exc
    with _measured("inspect", storage):
        return _inspected(rel, inspect)


def _inspected(rel: str, inspect: Callable[[str], T]) -> T:
    try:
        return inspect(rel)
    except SegmentError:
        raise
    except WindpipeError as exc:
        if exc.type == ErrorType.UNAVAILABLE:
            raise  # the store did not answer: retry later, the segment may be fine
        raise segment_problem(f"segment {rel!r}: {exc.message}", path=rel) from exc
    except FileNotFoundError as exc:
        raise segment_problem(f"segment {rel!r} does not exist", path=rel) from exc
    except Exception as exc:
        _log.warning("segment.unreadable", path=rel, error=f"{type(exc).__name__}: {exc}")
        raise segment_problem(
            f"segment {rel!r} cannot be read as parquet or zarr v3 ({type(exc).__name__}; "
            "the server log has the details)", path=rel
        ) from exc


def verify_segment(storage: Storage, info: SegmentInfo) -> dict[str, int] | None:
    """Check that ``info``'s segment still matches its registration fingerprint.

    Raises :class:`SegmentChanged` (:class:`SegmentError` when it is gone). Called on
    every chunk load, so it is cheap when nothing changed: a parquet file costs one
    ``stat`` (size, inode, mtime) on a local disk or one ``head`` (size, e-tag) on S3,
    and its footer is re-hashed only when those differ from the last match; a zarr
    group is listed once per process, then each chunk file read is checked against
    its registered size (returned: ``{file: size}``).
    """
    return format_named(info.format, path=info.path).verify(storage, info)


def unread_null_counts(storage: Storage, info: SegmentInfo, names: list[str]) -> dict[str, int]:
    """Null counts of ``names`` known without reading a value: a parquet segment's footer
    statistics (where the writer kept them); a zarr segment's integer and boolean arrays,
    which cannot hold a null. Columns missing from the answer must be read to be counted
    (a float column's NaN is never in a footer)."""
    if info.format == "parquet":
        return footer_null_counts(storage, info, names)
    floating = ("float", "double", "mixed")
    return {n: 0 for n in names if not any(f in info.column(n).dtype for f in floating)}


def _check_columns(info: SegmentInfo, columns: tuple[str, ...] | list[str]) -> list[str]:
    names = list(dict.fromkeys(columns))
    for name in names:
        col = info.column(name)
        if not col.numeric:
            raise segment_problem(
                f"column {name!r} of segment {info.path!r} has type {col.dtype}, not numeric",
                path=info.path,
            )
    return names


def read_chunk(
    storage: Storage, info: SegmentInfo, chunk_idx: int, columns: tuple[str, ...] | list[str]
) -> dict[str, np.ndarray]:
    """Rows of chunk ``chunk_idx`` (a parquet row group / zarr chunk along axis 0).

    Returns float64 arrays (null -> NaN, integers and booleans cast), one per
    requested column. Opened footers and zarr arrays are cached per
    (root, path, fingerprint), so repeated calls do not re-read metadata.
    """
    if not 0 <= chunk_idx < len(info.chunk_rows):
        raise segment_problem(
            f"segment {info.path!r} has {len(info.chunk_rows)} chunks, no chunk {chunk_idx}",
            path=info.path,
        )
    names = _check_columns(info, columns)
    with _measured("chunk", storage):
        return _read_chunk(storage, info, chunk_idx, names)


def _read_chunk(storage: Storage, info: SegmentInfo, chunk_idx: int,
                names: list[str]) -> dict[str, np.ndarray]:
    fmt = format_named(info.format, path=info.path)
    try:
        sizes = fmt.verify(storage, info)
        return fmt.read_chunk(storage, info, chunk_idx, names, sizes=sizes)
    except SegmentChanged:
        raise
    except WindpipeError as exc:
        if exc.type == ErrorType.UNAVAILABLE:
            raise
        fmt.forget_verified(storage, info)
        fmt.verify(storage, info)  # a file changed under the read: say so
        raise
    except (ChunkFileChanged, OSError, pa.ArrowException) as exc:
        fmt.forget_verified(storage, info)
        fmt.verify(storage, info)  # a file changed under the read: say so
        if isinstance(exc, ChunkFileChanged):
            raise segment_changed(info, str(exc)) from exc
        raise segment_problem(
            f"reading chunk {chunk_idx} of segment {info.path!r} failed: "
            f"{type(exc).__name__}: {exc}",
            path=info.path,
        ) from exc
    except Exception as exc:
        _log.warning("segment.chunk_unreadable", path=info.path, chunk=chunk_idx,
                     error=f"{type(exc).__name__}: {exc}")
        raise segment_problem(
            f"reading chunk {chunk_idx} of segment {info.path!r} failed "
            f"({type(exc).__name__}; the server log has the details)",
            path=info.path,
        ) from exc


def read_chunks(storage: Storage, info: SegmentInfo, chunks: Sequence[int],
                columns: tuple[str, ...] | list[str]) -> pa.Table:
    """Chunks ``chunks`` of a segment (in that order) as one arrow table of ``columns``;
    :func:`to_float64` of a column gives what :func:`read_chunk` would, chunk after chunk.

    A small local parquet file (up to :data:`SMALL_FILE_BYTES`) is read once for all of
    them and verified from the same bytes, so a block fill over many small segments pays
    one open a segment, not a ``stat``, a footer and an open per chunk; any other segment
    is read chunk by chunk with :func:`read_chunk`. Errors are :func:`read_chunk`'s.
    """
    for k in chunks:
        if not 0 <= k < len(info.chunk_rows):
            raise segment_problem(
                f"segment {info.path!r} has {len(info.chunk_rows)} chunks, no chunk {k}",
                path=info.path)
    names = _check_columns(info, columns)
    if info.format == "parquet" and storage.is_local:
        with _measured("file", storage):
            table = _small_file(storage, info, chunks, names)
        if table is not None:
            return table
    parts = [read_chunk(storage, info, k, names) for k in chunks]
    return pa.table({name: from_numpy(np.concatenate([part[name] for part in parts]) if parts
                                      else np.empty(0, dtype=np.float64)) for name in names})


def _small_file(storage: Storage, info: SegmentInfo, chunks: Sequence[int],
                names: list[str]) -> pa.Table | None:
    """A small local parquet file's chunks in one read (None: the file is not small)."""
    try:
        return read_small_chunks(storage, info, list(chunks), names, max_bytes=SMALL_FILE_BYTES)
    except (SegmentError, SegmentChanged, PathEscapeError):
        raise
    except (OSError, pa.ArrowException) as exc:
        raise segment_problem(
            f"reading segment {info.path!r} failed: {type(exc).__name__}: {exc}",
            path=info.path,
        ) from exc


@contextmanager
def read_ahead(storage: Storage, reads: Iterable[tuple[SegmentInfo, int, Sequence[str]]],
               ) -> Iterator[ReadAhead | None]:
    """While the block runs, fetch the chunks ``reads`` names (segment, chunk index,
    columns), in the order the caller will :func:`read_chunk` them, ahead of it:
    concurrent, coalesced ranged reads within the storage's read-ahead budget
    (:meth:`Storage.read_ahead`). The chunks read are byte for byte the same; a chunk
    the read-ahead could not fetch is read as before, with the same errors. Nothing
    on a local root (None)."""
    if storage.is_local:
        yield None
        return
    units: list[AheadRead] = []
    for info, chunk_idx, columns in reads:
        fmt = FORMATS_BY_NAME.get(info.format)
        if fmt is None or not 0 <= chunk_idx < len(info.chunk_rows):
            continue
        try:
            units.extend(fmt.ahead_reads(storage, info, chunk_idx, list(dict.fromkeys(columns))))
        except (WindpipeError, OSError, ValueError):
            continue  # the chunk read itself reports what is wrong
    with storage.read_ahead(units) as ahead:
        yield ahead


def read_rows(
    storage: Storage,
    info: SegmentInfo,
    start: int,
    stop: int,
    columns: tuple[str, ...] | list[str],
) -> dict[str, np.ndarray]:
    """Rows ``[start, stop)`` of a segment as float64 arrays (clamped to the segment)."""
    start = max(0, int(start))
    stop = min(info.row_count, int(stop))
    names = _check_columns(info, columns)
    if stop <= start:
        return {name: np.empty(0, dtype=np.float64) for name in names}
    return format_named(info.format, path=info.path).read_rows(
        storage, info, start, stop, names, by_chunk=read_chunk)


def read_all(storage: Storage, info: SegmentInfo,
             columns: tuple[str, ...] | list[str]) -> dict[str, np.ndarray]:
    """Every row of ``columns`` as float64 arrays, checked against the fingerprint like
    :func:`read_chunk`: :func:`read_chunks` of every chunk (a small local parquet file in
    one read, verified from the same bytes; any other segment chunk by chunk)."""
    table = read_chunks(storage, info, range(len(info.chunk_rows)), columns)
    return {name: to_float64(table.column(name)) for name in _check_columns(info, columns)}
