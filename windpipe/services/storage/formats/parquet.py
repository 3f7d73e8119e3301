"""Parquet segments: one file; its row groups are the chunks; its fingerprint digests the
file's size and footer."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow._parquet import ParquetReader

from windpipe.services.contract.errors import SegmentError
from windpipe.services.storage.formats.base import (
    ChunkReader,
    ColumnInfo,
    SegmentFormat,
    SegmentInfo,
    cache_forget,
    cache_get,
    cache_put,
    is_numeric,
    segment_changed,
    segment_problem,
    to_float64,
)
from windpipe.services.storage.readahead import AheadRead
from windpipe.services.storage.store import Storage

__all__ = [
    "PARQUET", "ParquetFormat", "SegmentValues", "column_chunk_ranges", "footer_null_counts",
    "read_small_chunks",
]

_TAIL_BYTES = 64 * 1024
_FLOATING = ("float", "double")
_DESCRIBED_KEYS = 64  # distinct stored arrow schemas remembered (a collection has a handful)

LocalRead = tuple[int, str, bytes]
"""``(size, version token, bytes)`` of a local file read by the caller: its last
``_TAIL_BYTES`` bytes, or the whole file (``windpipe.services.storage.beneath.Read``)."""


class SegmentValues(NamedTuple):
    """What one read of a whole small file tells about its values, beside its description:
    ``footer_nulls``, the null counts its footer's statistics hold for its numeric columns
    that are neither floating (a footer never counts a NaN) nor asked for (every row group
    counting them); ``table``, the decoded values of the other numeric columns, every row
    (no columns for a file without rows; :func:`to_float64` reads them as a chunk read
    would). A column is in one of the two, never both."""

    footer_nulls: dict[str, int]
    table: pa.Table


def _footer(storage: Storage, rel: str, size: int, tail: bytes | None = None,
            ) -> tuple[bytes, str]:
    """The tail bytes read and the fingerprint (a digest of size and footer); ``tail``:
    the object's last ``min(size, _TAIL_BYTES)`` bytes when already read."""
    if size < 12:
        raise segment_problem(f"segment {rel!r} is not a parquet file ({size} bytes)", path=rel)
    if tail is None:
        tail = storage.get_range(rel, max(0, size - _TAIL_BYTES), size)
    if tail[-4:] != b"PAR1":
        raise segment_problem(f"segment {rel!r} is not a parquet file (no PAR1 footer)", path=rel)
    footer_len = int.from_bytes(tail[-8:-4], "little")
    if footer_len + 8 > size - 4:
        raise segment_problem(f"segment {rel!r} has a corrupt parquet footer", path=rel)
    footer: bytes | memoryview
    if footer_len + 8 <= len(tail):
        footer = memoryview(tail)[len(tail) - footer_len - 8 :]  # hashed in place
    else:
        footer = storage.get_range(rel, size - footer_len - 8, size)
    digest = hashlib.blake2b(b"parquet\0" + str(size).encode() + b"\0", digest_size=16)
    digest.update(footer)
    return tail, digest.hexdigest()


def _local_tail(storage: Storage, rel: str, *, nbytes: int = _TAIL_BYTES, whole_up_to: int = 0,
                ) -> LocalRead | None:
    """Size, version token and last ``nbytes`` bytes (the whole file when it is at most
    ``whole_up_to`` bytes) of a local file in one open (``rel`` already validated); None
    for a root that is not local."""
    root = storage.local_root
    if root is None:
        return None
    try:
        fd = os.open(f"{root}/{rel}", os.O_RDONLY)  # a str join: pathlib's is 10 us
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise FileNotFoundError(f"no object at {rel!r} under {storage.uri}") from exc
    try:
        st = os.fstat(fd)
        size = int(st.st_size)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(f"no object at {rel!r} under {storage.uri}")
        start = 0 if size <= whole_up_to else max(0, size - nbytes)
        tail = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    return size, f"{st.st_ino:x}-{st.st_mtime_ns:x}", tail


_described: OrderedDict[bytes | None, list[tuple[pq.ParquetSchema, tuple[ColumnInfo, ...]]]] = (
    OrderedDict())
_described_lock = threading.Lock()


def _columns(meta: pq.FileMetaData, parsed: pq.ParquetReader | pq.ParquetFile,
             ) -> tuple[ColumnInfo, ...]:
    """The columns a footer describes, one shared tuple per distinct schema. Describing an
    arrow schema (its fields, their types as text) costs more than parsing a small
    footer, and a collection of many files has a handful of schemas (and each described
    segment keeps its tuple: one copy, not one a segment). The arrow schema a reader
    gives (``parsed.schema_arrow``) is decided by the file's parquet schema and the arrow
    schema stored in its metadata, so both are the key (the stored one hashed, the
    parquet one compared)."""
    stored = meta.metadata
    key = None if stored is None else stored.get(b"ARROW:schema")
    schema = meta.schema
    for known, columns in _described.get(key, ()):
        if known.equals(schema):
            return columns
    columns = tuple(ColumnInfo(f.name, str(f.type), is_numeric(f.type))
                    for f in parsed.schema_arrow)
    with _described_lock:
        entries = _described.setdefault(key, [])
        entries.insert(0, (schema, columns))
        del entries[8:]
        _described.move_to_end(key)
        while len(_described) > _DESCRIBED_KEYS:
            _described.popitem(last=False)
    return columns


_plans: dict[tuple[int, tuple[str, ...]], tuple[object, tuple[list[str], list[str],
                                                                 dict[str, int]]]] = {}


def _value_plan(columns: tuple[ColumnInfo, ...], also: Collection[str],
                ) -> tuple[list[str], list[str], dict[str, int]]:
    """For a file of ``columns`` (a shared tuple, :func:`_columns`): the numeric columns
    whose nulls a footer may count (neither floating nor in ``also``), every numeric
    column, and each column's position; worked out once a column list."""
    key = (id(columns), tuple(also))
    found = _plans.get(key)
    if found is not None and found[0] is columns:
        return found[1]
    numeric = [c.name for c in columns if c.numeric]
    footered = [c.name for c in columns if c.numeric and c.name not in also
                and not any(f in c.dtype for f in _FLOATING)]
    plan = (footered, numeric, {c.name: j for j, c in enumerate(columns)})
    if len(_plans) >= _DESCRIBED_KEYS * 8:
        _plans.clear()
    _plans[key] = (columns, plan)  # the tuple kept: its id is not reused while here
    return plan


class ParquetFormat:
    """``*.parquet`` / ``*.pq`` files (and any path that is not marked as another format)."""

    name: SegmentFormat = "parquet"

    def named(self, path: str) -> bool:
        """``*.parquet`` and ``*.pq``."""
        return path.endswith((".parquet", ".pq"))

    def marked(self, storage: Storage, path: str) -> bool:
        """A parquet file has no marker apart from its name."""
        return False

    def inspect(self, storage: Storage, rel: str) -> SegmentInfo:
        """Schema and row groups from the footer (fingerprinted and cached). A local file
        is opened once: its size, token and tail in one read, the footer parsed from it."""
        return self._described(storage, rel)[0]

    def inspect_values(self, storage: Storage, rel: str, *, max_bytes: int,
                       also: Collection[str], read: LocalRead | None = None,
                       ) -> tuple[SegmentInfo, SegmentValues | None]:
        """:meth:`inspect`, and when the file is local and at most ``max_bytes`` (read
        whole by the same one open), its :class:`SegmentValues` from those bytes: the
        footer's null counts and the values of the numeric columns a footer cannot
        answer for (floating ones, those without null counts) and of ``also``. The
        values are the bytes the fingerprint was computed from, so registration's
        profile needs no second read. None when the file is larger, remote, or its pages
        do not decode (the caller reads them the usual way, which reports what is wrong).
        ``read``: the file's bytes when the caller read them (``rel`` then checked by
        that read: :class:`windpipe.services.storage.beneath.Beneath`)."""
        info, reader, whole = self._described(storage, rel, whole_up_to=max_bytes, local=read)
        if reader is None or not whole:
            return info, None
        meta = reader.metadata
        footered, numeric, where = _value_plan(info.columns, also)
        footer = _meta_null_counts(meta, footered) if footered else {}
        names = [n for n in numeric if n not in footer] if footer else numeric
        if not names or not info.row_count:
            return info, SegmentValues(footer, pa.table({}))
        try:
            if meta.num_columns == len(info.columns):  # flat: field j is leaf column j
                indices = [where[n] for n in names]
            else:  # a numeric column is a top-level leaf: its path is its name
                indices = [reader.column_name_idx(n) for n in names]
            table = reader.read_all(column_indices=indices, use_threads=False)
        except (OSError, pa.ArrowException, KeyError):
            return info, None
        return info, SegmentValues(footer, table)

    def _described(self, storage: Storage, rel: str, *, whole_up_to: int = 0,
                   local: LocalRead | None = None,
                   ) -> tuple[SegmentInfo, pq.ParquetReader | None, bool]:
        """The description; for a local file, the parsed file over the bytes of the one
        read (None otherwise), and whether they are the whole file (``whole_up_to``: read
        a local file whole up to this size; ``local``: the bytes the caller read). The
        footer and the match of size and token are cached for later reads, but for a
        small file the caller read whole (a registration's batch: its reads read such a
        file whole again and verify it from those bytes, and the cache holds the last
        few hundred of a collection's thousands)."""
        given = local is not None
        if local is None:
            local = _local_tail(storage, rel, whole_up_to=whole_up_to)
        if local is None:
            size, token = storage.version_token(rel)
            tail, fingerprint = _footer(storage, rel, size)
        else:
            size, token, tail = local
            tail, fingerprint = _footer(storage, rel, size, tail)
        footer_len = int.from_bytes(tail[-8:-4], "little")
        parsed = None
        if local is not None and footer_len + 8 <= len(tail):
            reader = parsed = pq.ParquetReader()  # pq.ParquetFile's reader, without the rest
            reader.open(pa.BufferReader(tail), arrow_extensions_enabled=True,  # (its default)
                        pre_buffer=False)  # in memory already: nothing to coalesce
            meta = reader.metadata
            columns = _columns(meta, reader)
        else:
            with storage.open_parquet(rel, tail=tail) as pf:
                meta = pf.metadata
                columns = _columns(meta, pf)
        rows, groups = int(meta.num_rows), meta.num_row_groups
        chunks = (rows,) if groups == 1 else tuple(
            int(meta.row_group(i).num_rows) for i in range(groups))
        info = SegmentInfo(rel, self.name, rows, columns, chunks, fingerprint)
        whole = parsed is not None and len(tail) == size
        if not (given and whole):  # a small file read whole is verified from its bytes again
            cache_put(("pq", storage.uri, rel, info.fingerprint), meta)
            cache_put(("pq-ok", storage.uri, rel, info.fingerprint), (size, token))
        return info, parsed, whole

    def verify(self, storage: Storage, info: SegmentInfo) -> dict[str, int] | None:
        """One ``stat`` / ``head``; the footer is re-hashed only when size or token moved."""
        try:
            size, token = storage.version_token(info.path)
        except FileNotFoundError:
            raise segment_problem(f"segment {info.path!r} does not exist",
                                 path=info.path) from None
        key = ("pq-ok", storage.uri, info.path, info.fingerprint)
        if cache_get(key) == (size, token):
            return None
        try:
            _, fingerprint = _footer(storage, info.path, size)
        except (SegmentError, FileNotFoundError, OSError):
            fingerprint = ""
        if fingerprint != info.fingerprint:
            raise segment_changed(info, f"now {size} bytes, footer differs")
        cache_put(key, (size, token))
        return None

    def forget_verified(self, storage: Storage, info: SegmentInfo) -> None:
        """Drop the memo of the last matching ``(size, token)``."""
        cache_forget(("pq-ok", storage.uri, info.path, info.fingerprint))

    def read_chunk(self, storage: Storage, info: SegmentInfo, chunk_idx: int,
                   names: list[str], *, sizes: dict[str, int] | None) -> dict[str, np.ndarray]:
        """Row group ``chunk_idx`` (the footer cached per root, path and fingerprint)."""
        del sizes  # parquet checks its footer, not file sizes
        key = ("pq", storage.uri, info.path, info.fingerprint)
        meta = cache_get(key)
        with storage.open_parquet(info.path, metadata=meta) as pf:
            if meta is None:
                cache_put(key, pf.metadata)
            if pf.metadata.num_row_groups != len(info.chunk_rows):
                raise segment_problem(
                    f"segment {info.path!r} changed since registration "
                    f"({pf.metadata.num_row_groups} row groups, expected "
                    f"{len(info.chunk_rows)})",
                    path=info.path,
                )
            table = pf.read_row_group(chunk_idx, columns=names)
        return {name: to_float64(table.column(name)) for name in names}

    def ahead_reads(self, storage: Storage, info: SegmentInfo, chunk_idx: int,
                    names: list[str]) -> list[AheadRead]:
        """The read of row group ``chunk_idx``: its column chunks of ``names``, located in
        the footer the probe brings (checked against the fingerprint first: a segment
        that changed is left to :meth:`read_chunk`, which reports it). The footer and
        the match are cached, so the chunk read neither reads nor re-hashes it."""

        def ranges(size: int, e_tag: str | None,
                   tail: memoryview) -> list[tuple[int, int]] | None:
            data = bytes(tail)
            footer_len = int.from_bytes(data[-8:-4], "little") if len(data) >= 8 else -1
            if footer_len < 0 or footer_len + 8 > len(data) or data[-4:] != b"PAR1":
                return None  # a footer larger than the probe: read it the usual way
            _, fingerprint = _footer(storage, info.path, size, data)
            if fingerprint != info.fingerprint:
                return None
            meta = cache_get(("pq", storage.uri, info.path, info.fingerprint))
            if meta is None:
                meta = pq.read_metadata(pa.BufferReader(data))
                cache_put(("pq", storage.uri, info.path, info.fingerprint), meta)
            cache_put(("pq-ok", storage.uri, info.path, info.fingerprint), (size, e_tag))
            return column_chunk_ranges(meta, chunk_idx, names)

        return [AheadRead(info.path, ranges, tail_bytes=_TAIL_BYTES)]

    def read_rows(self, storage: Storage, info: SegmentInfo, start: int, stop: int,
                  names: list[str], *, by_chunk: ChunkReader) -> dict[str, np.ndarray]:
        """The row groups the rows span, read by ``by_chunk`` and cut."""
        starts = info.chunk_starts
        first = int(np.searchsorted(starts, start, side="right") - 1)
        last = int(np.searchsorted(starts, stop, side="left") - 1)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for idx in range(first, last + 1):
            chunk = by_chunk(storage, info, idx, names)
            lo = max(start, int(starts[idx])) - int(starts[idx])
            hi = min(stop, int(starts[idx + 1])) - int(starts[idx])
            for name in names:
                parts[name].append(chunk[name][lo:hi])
        return {name: np.concatenate(parts[name]) for name in names}


def column_chunk_ranges(meta: pq.FileMetaData, group: int,
                        names: list[str]) -> list[tuple[int, int]] | None:
    """Byte ranges ``[start, end)`` of row group ``group``'s column chunks of ``names``
    (dictionary page included), as the parquet reader reads them; None when a column
    is not a top-level column of the file."""
    if not 0 <= group < meta.num_row_groups:
        return None
    where = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    rg = meta.row_group(group)
    out = []
    for name in names:
        j = where.get(name)
        if j is None:
            return None
        col = rg.column(j)
        dict_at = col.dictionary_page_offset
        start = dict_at if col.has_dictionary_page and dict_at and dict_at > 0 \
            else col.data_page_offset
        out.append((int(start), int(start) + int(col.total_compressed_size)))
    return out


def footer_null_counts(storage: Storage, info: SegmentInfo, names: list[str]) -> dict[str, int]:
    """Null counts of columns ``names`` from the footer's statistics, without reading a
    value: a column is in the answer only when every row group's statistics count its
    nulls (writers may leave them out)."""
    meta = cache_get(("pq", storage.uri, info.path, info.fingerprint))
    if meta is None:
        with storage.open_parquet(info.path) as pf:
            meta = pf.metadata
    return _meta_null_counts(meta, names)


def _meta_null_counts(meta: pq.FileMetaData, names: list[str]) -> dict[str, int]:
    """:func:`footer_null_counts` of a parsed footer."""
    where = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    out: dict[str, int] = {}
    for name in names:
        j = where.get(name)
        if j is None:
            continue
        total = 0
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(j).statistics
            if stats is None or not stats.has_null_count:
                break
            total += int(stats.null_count)
        else:
            out[name] = total
    return out


def read_small_chunks(storage: Storage, info: SegmentInfo, chunks: list[int],
                      names: list[str], *, max_bytes: int) -> pa.Table | None:
    """Row groups ``chunks`` (in that order) of columns ``names`` of a local file of at
    most ``max_bytes`` as one arrow table, from one read checked against the fingerprint
    (what is read is what was registered: :class:`SegmentChanged` otherwise); None for
    other segments. A file whose row groups no longer match the registration raises
    :class:`SegmentError`.

    The bytes are decoded by pyarrow's parquet reader itself (``ParquetReader``, what
    ``ParquetFile`` wraps), its columns found by name: the same table as
    ``ParquetFile.read_row_groups`` without the Python ``ParquetFile`` builds around it
    for every file (a map of nested column paths), and without pre-buffering, which
    coalesces reads of a slow source and only copies ranges of bytes already in memory
    (together a fifth of a 60-row file's read)."""
    opened = _small_file(storage, info, max_bytes=max_bytes)
    if opened is None:
        return None
    reader, source = opened
    meta = reader.metadata
    if meta.num_row_groups != len(info.chunk_rows) or any(
            meta.row_group(k).num_rows != info.chunk_rows[k] for k in chunks):
        raise segment_problem(
            f"segment {info.path!r} changed since registration (its row groups differ)",
            path=info.path)
    try:
        indices = [reader.column_name_idx(name) for name in names]
    except KeyError:  # not a top-level column: ParquetFile's lookup says what is wrong
        with pq.ParquetFile(source, metadata=meta) as pf:
            return pf.read_row_groups(chunks, columns=names, use_threads=False)
    return reader.read_row_groups(chunks, column_indices=indices, use_threads=False)


def _small_file(storage: Storage, info: SegmentInfo, *, max_bytes: int,
                ) -> tuple[ParquetReader, pa.BufferReader] | None:
    """The parquet reader (and its source) over one whole read of a local file of at
    most ``max_bytes``, its fingerprint checked on those bytes; None for a larger or
    remote file."""
    rel = storage.validate_relative_path(info.path)
    try:
        found = _local_tail(storage, rel, nbytes=max_bytes)
    except FileNotFoundError:
        raise segment_problem(f"segment {info.path!r} does not exist", path=info.path) from None
    if found is None or len(found[2]) != found[0]:
        return None
    size, _token, data = found
    try:
        _, fingerprint = _footer(storage, rel, size, data)
    except SegmentError:
        fingerprint = ""
    if fingerprint != info.fingerprint:
        raise segment_changed(info, f"now {size} bytes, footer differs")
    meta = cache_get(("pq", storage.uri, info.path, info.fingerprint))
    source = pa.BufferReader(data)
    reader = ParquetReader()
    reader.open(source, metadata=meta, pre_buffer=False, arrow_extensions_enabled=True)
    return reader, source


PARQUET = ParquetFormat()
