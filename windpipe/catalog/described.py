"""Segment descriptions held in columns while a registration checks them.

A registration describes every segment (format, rows, row groups, fingerprint, columns)
before it stores any, and a collection has 100,000 segments: as Python objects (a
:class:`~services.storage.segments.SegmentInfo` a segment, its strings and tuples) that
is a few kilobytes a segment held until the end. :class:`Described` keeps fixed-width
columns instead, one slot a segment allocated up front (the segments are known from the
manifest; results may come in any order), and the column lists and row-group layouts
once each (a collection has a handful of each, whatever its size): about 50 bytes a
segment, the fields its database row receives.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl

from windpipe.services.storage.segments import ColumnInfo, SegmentFormat, SegmentInfo

__all__ = ["Described"]

_FORMATS: tuple[SegmentFormat, ...] = ("parquet", "zarr")
_FINGERPRINT = 32  # bytes of a fingerprint held inline (blake2b-128 in hex); longer ones aside


class _Interned:
    """Distinct values, each given a small id: by identity first (the formats share one
    tuple per distinct column list: no hashing of it a segment), then by value."""

    def __init__(self) -> None:
        self.values: list[tuple[object, ...]] = []
        self._by_value: dict[tuple[object, ...], int] = {}
        self._by_id: dict[int, int] = {}
        self._alive: list[object] = []  # what _by_id's keys are the ids of (never reused)

    def __call__(self, value: tuple[object, ...]) -> int:
        found = self._by_id.get(id(value))
        if found is not None:
            return found
        found = self._by_value.get(value)
        if found is None:
            found = self._by_value[value] = len(self.values)
            self.values.append(value)
        if len(self._alive) < 4096:
            self._by_id[id(value)] = found
            self._alive.append(value)
        return found


class Described:
    """The descriptions of ``count`` segments, by index (see the module docstring);
    ``problems`` holds the one-line problem of each segment that failed its checks."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.done = 0
        self.row_count = np.zeros(count, dtype=np.int64)
        self.format = np.zeros(count, dtype=np.int8)
        self.columns_id = np.full(count, -1, dtype=np.int32)  # -1: not described (yet)
        self.chunks_id = np.zeros(count, dtype=np.int32)
        self.fingerprint = np.zeros(count, dtype=f"S{_FINGERPRINT}")
        self._long: dict[int, str] = {}  # fingerprints that do not fit inline
        self._columns = _Interned()
        self._chunks = _Interned()
        self.problems: dict[int, str] = {}

    def add_batch(self, found: list[tuple[int, SegmentInfo | str]]) -> None:
        """:meth:`add` of each ``(index, description or problem)``, the fixed-width fields
        set at once."""
        infos = [(k, f) for k, f in found if not isinstance(f, str)]
        for k, f in found:
            if isinstance(f, str):
                self.add(k, f)
        if not infos:
            return
        self.done += len(infos)
        at = np.fromiter((k for k, _f in infos), dtype=np.int64, count=len(infos))
        self.row_count[at] = [f.row_count for _k, f in infos]
        self.format[at] = [_FORMATS.index(f.format) for _k, f in infos]
        self.columns_id[at] = [self._columns(f.columns) for _k, f in infos]
        self.chunks_id[at] = [self._chunks(f.chunk_rows) for _k, f in infos]
        prints = [f.fingerprint for _k, f in infos]
        if all(len(fp) == _FINGERPRINT and fp.isascii() for fp in prints):
            self.fingerprint[at] = prints  # numpy encodes ASCII text for an S column
        else:
            for (k, _f), fp in zip(infos, prints, strict=True):
                if len(fp) == _FINGERPRINT and fp.isascii():
                    self.fingerprint[k] = fp.encode("ascii")
                else:
                    self._long[k] = fp

    def add(self, index: int, found: SegmentInfo | str) -> None:
        """Segment ``index``'s description, or its problem."""
        self.done += 1
        if isinstance(found, str):
            self.problems[index] = found
            return
        self.row_count[index] = found.row_count
        self.format[index] = _FORMATS.index(found.format)
        self.columns_id[index] = self._columns(found.columns)
        self.chunks_id[index] = self._chunks(found.chunk_rows)
        fp = found.fingerprint
        if len(fp) == _FINGERPRINT and fp.isascii():
            self.fingerprint[index] = fp.encode("ascii")
        else:
            self._long[index] = fp

    @property
    def column_lists(self) -> list[tuple[ColumnInfo, ...]]:
        """The distinct column lists, by id (``columns_id``)."""
        return self._columns.values  # type: ignore[return-value]

    def described(self, index: int) -> bool:
        """Whether segment ``index`` was described (checked, without a problem)."""
        return bool(self.columns_id[index] >= 0)

    def info(self, index: int, path: str) -> SegmentInfo:
        """Segment ``index``'s :class:`SegmentInfo` (``path``: its normalized path)."""
        return SegmentInfo(
            path=path, format=_FORMATS[int(self.format[index])],
            row_count=int(self.row_count[index]),
            columns=self.column_lists[int(self.columns_id[index])],
            chunk_rows=self._chunks.values[int(self.chunks_id[index])],  # type: ignore[arg-type]
            fingerprint=self._fingerprint(index))

    def _fingerprint(self, index: int) -> str:
        long = self._long.get(index)
        return long if long is not None else bytes(self.fingerprint[index]).decode("ascii")

    def frame(self) -> pl.DataFrame:
        """``format``, ``row_count``, ``chunk_rows`` (list of int64), ``fingerprint`` and
        ``columns_id``, one row a segment, by index."""
        layouts = pl.Series("chunk_rows", [list(v) for v in self._chunks.values],
                            dtype=pl.List(pl.Int64))
        fingerprint = pl.Series("fingerprint", self.fingerprint, dtype=pl.Binary).cast(
            pl.String, strict=False)
        if self._long:
            fingerprint = fingerprint.scatter(list(self._long), list(self._long.values()))
        return pl.DataFrame([
            pl.Series("format", list(_FORMATS), dtype=pl.String).gather(self.format),
            pl.Series("row_count", self.row_count, dtype=pl.Int64),
            layouts.gather(self.chunks_id) if len(layouts) else
            pl.Series("chunk_rows", [[]] * self.count, dtype=pl.List(pl.Int64)),
            fingerprint,
            pl.Series("columns_id", self.columns_id, dtype=pl.Int32),
        ])

    def __iter__(self) -> Iterator[int]:
        """The indices of the segments described."""
        return iter(np.flatnonzero(self.columns_id >= 0).tolist())

