"""What every segment format shares: the segment's description, its errors, the format
protocol and the small cache of opened metadata.

:mod:`windpipe.services.storage.segments` re-exports the value types and errors; the formats
(:mod:`.parquet`, :mod:`.zarr`) implement :class:`SegmentFormatReader`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windpipe.services.arrow_values import to_numpy
from windpipe.services.contract.errors import SegmentChanged, SegmentError
from windpipe.services.storage.readahead import AheadRead
from windpipe.services.storage.store import Storage

__all__ = [
    "ChunkReader",
    "ColumnInfo",
    "SegmentFormat",
    "SegmentFormatReader",
    "SegmentInfo",
    "cache_forget",
    "cache_get",
    "cache_put",
    "float64_columns",
    "is_numeric",
    "segment_changed",
    "segment_problem",
    "to_float64",
]

SegmentFormat = Literal["parquet", "zarr"]
_CACHE_ENTRIES = 512


def segment_problem(message: str, *, path: str | None = None) -> SegmentError:
    """A segment that is missing, unreadable, corrupt or malformed (``segment_error``)."""
    return SegmentError(message, details={"path": path} if path else {})


def segment_changed(info: SegmentInfo, why: str) -> SegmentChanged:
    """A segment that no longer matches its registration fingerprint (``segment_changed``):
    rewritten, truncated or removed under an immutable version."""
    return SegmentChanged(
        f"segment {info.path!r} changed since its version was registered ({why}); "
        "windpipe will not serve different data under the same version id",
        details={"path": info.path, "fingerprint": info.fingerprint, "why": why},
    )


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One column: name, arrow type string (``"float"``, ``"double"``, ``"int64"``...), and
    whether :func:`~services.storage.segments.read_chunk` can read it as float64 (integers,
    floats, booleans, decimals).
    """

    name: str
    dtype: str
    numeric: bool

    def as_dict(self) -> dict[str, Any]:
        """``{"name", "dtype", "numeric"}`` (the schema entry of a registered version)."""
        return {"name": self.name, "dtype": self.dtype, "numeric": self.numeric}


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What registration learns about a segment; enough to read any chunk of it."""

    path: str
    format: SegmentFormat
    row_count: int
    columns: tuple[ColumnInfo, ...]
    chunk_rows: tuple[int, ...]
    fingerprint: str

    @property
    def chunk_starts(self) -> np.ndarray:
        """int64 row offset of each chunk (length ``len(chunk_rows) + 1``, last = row_count)."""
        return np.concatenate([[0], np.cumsum(self.chunk_rows, dtype=np.int64)]).astype(np.int64)

    def column(self, name: str) -> ColumnInfo:
        """The column called ``name``; :class:`SegmentError` if there is none."""
        for col in self.columns:
            if col.name == name:
                return col
        raise segment_problem(
            f"segment {self.path!r} has no column {name!r} (it has "
            f"{[c.name for c in self.columns]})",
            path=self.path,
        )


# (storage, info, chunk index, column names) -> float64 columns: the checked chunk read
ChunkReader = Callable[[Storage, SegmentInfo, int, list[str]], dict[str, np.ndarray]]


class SegmentFormatReader(Protocol):
    """One segment format: how to recognize, describe, verify and read it."""

    @property
    def name(self) -> SegmentFormat:
        """The format's name (``SegmentInfo.format``, the key of ``FORMATS``)."""
        ...

    def named(self, path: str) -> bool:
        """Whether ``path``'s name says this format (its suffix)."""
        ...

    def marked(self, storage: Storage, path: str) -> bool:
        """Whether ``storage`` holds this format's marker at ``path`` (no marker: False)."""
        ...

    def inspect(self, storage: Storage, rel: str) -> SegmentInfo:
        """Open the segment at ``rel``, check it and describe it (caching what it opened)."""
        ...

    def verify(self, storage: Storage, info: SegmentInfo) -> dict[str, int] | None:
        """Raise :class:`SegmentChanged` unless the segment still matches ``info``; the
        registered file sizes a chunk read checks against, when the format has them."""
        ...

    def forget_verified(self, storage: Storage, info: SegmentInfo) -> None:
        """Drop the memo of the last successful :meth:`verify` (verify again next time)."""
        ...

    def read_chunk(self, storage: Storage, info: SegmentInfo, chunk_idx: int,
                   names: list[str], *, sizes: dict[str, int] | None) -> dict[str, np.ndarray]:
        """Chunk ``chunk_idx`` of checked numeric columns ``names`` as float64 arrays."""
        ...

    def ahead_reads(self, storage: Storage, info: SegmentInfo, chunk_idx: int,
                    names: list[str]) -> list[AheadRead]:
        """What :meth:`read_chunk` of the same arguments will read from an object store,
        for a read-ahead to fetch first (:mod:`windpipe.services.storage.readahead`)."""
        ...

    def read_rows(self, storage: Storage, info: SegmentInfo, start: int, stop: int,
                  names: list[str], *, by_chunk: ChunkReader) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` (inside the segment, not empty) of columns ``names``;
        ``by_chunk`` reads one chunk with every check of a chunk read."""
        ...


def is_numeric(dtype: pa.DataType) -> bool:
    """Whether a column of arrow type ``dtype`` reads as float64."""
    return bool(
        pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_decimal(dtype)
    )


def to_float64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An arrow column as float64 numpy (null -> NaN)."""
    if not pa.types.is_float64(column.type):
        column = pc.cast(column, pa.float64())
    return to_numpy(column)


def float64_columns(tables: list[pa.Table], names: list[str]) -> dict[str, np.ndarray]:
    """Each column of ``tables`` (one after another) as one float64 array, null as NaN:
    tables of one schema concatenated first, so the conversion runs once per schema."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    k = 0
    while k < len(tables):
        j = k + 1
        while j < len(tables) and tables[j].schema.equals(tables[k].schema):
            j += 1
        merged = tables[k] if j == k + 1 else pa.concat_tables(tables[k:j])
        for name in names:
            parts[name].append(to_float64(merged.column(name)))
        k = j
    return {name: (arrays[0] if len(arrays) == 1 else np.concatenate(arrays))
            for name, arrays in parts.items() if arrays}


_cache: OrderedDict[tuple[str, ...], Any] = OrderedDict()
_cache_lock = threading.Lock()


def cache_get(key: tuple[str, ...]) -> Any:
    """A cached footer, array map, plan or verification memo (None when not cached)."""
    with _cache_lock:
        value = _cache.get(key)
        if value is not None:
            _cache.move_to_end(key)
        return value


def cache_put(key: tuple[str, ...], value: Any) -> None:
    """Cache ``value`` (least recently used entries go first)."""
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)


def cache_forget(key: tuple[str, ...]) -> None:
    """Drop one entry."""
    with _cache_lock:
        _cache.pop(key, None)
