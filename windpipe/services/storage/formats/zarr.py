"""Zarr v3 segments: a group directory with one 1-D array per column, rows on axis 0,
every array the same length; nulls are float NaN (integer zarr arrays cannot hold
nulls). The group attribute ``columns`` (a list of names), when present, fixes the
column order; otherwise it is sorted by name. Chunks (or shards) along axis 0 are the
read units; the fingerprint digests every file's name and size and the ``zarr.json``
documents' bytes.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa

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
)
from windpipe.services.storage.formats.zarr_docs import layout_from_docs
from windpipe.services.storage.readahead import AheadRead
from windpipe.services.storage.store import Storage
from windpipe.services.storage.zarr_chunks import ZarrColumnPlan, column_plan, read_chunk_file

__all__ = ["ZARR", "ZarrFormat"]


def _fingerprint(
    storage: Storage, rel: str, listing: list[tuple[str, int]]
) -> tuple[dict[str, bytes], str]:
    """The zarr.json documents and the fingerprint (every file's name and size, and the
    documents' bytes)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(b"zarr\0")
    docs: dict[str, bytes] = {}
    for p, size in listing:
        digest.update(f"{p[len(rel) + 1 :]}\0{size}\0".encode())
        if p.endswith("zarr.json"):
            docs[p] = storage.get(p)
            digest.update(docs[p])
    return docs, digest.hexdigest()


def _arrays(storage: Storage, info: SegmentInfo) -> dict[str, Any]:
    key = ("zarr", storage.uri, info.path, info.fingerprint)
    arrays = cache_get(key)
    if arrays is None:
        arrays = dict(storage.open_zarr(info.path).arrays())
        cache_put(key, arrays)
    return dict(arrays)


def _plans(storage: Storage, info: SegmentInfo, names: list[str]) -> dict[str, Any]:
    key = ("zplan", storage.uri, info.path, info.fingerprint)
    plans = cache_get(key)
    if plans is None or any(n not in plans for n in names):
        plans = dict(plans or {})
        for name in names:
            try:
                doc = storage.get(f"{info.path}/{name}/zarr.json")
            except FileNotFoundError:
                doc = b"{}"
            plans[name] = column_plan(f"{info.path}/{name}", doc)
        cache_put(key, plans)
    return dict(plans)


def _whole(size: int, e_tag: str | None, tail: memoryview) -> list[tuple[int, int]]:
    """A chunk file is read whole (what the probe did not bring)."""
    del e_tag
    return [(0, size - len(tail))] if size > len(tail) else []


class ZarrFormat:
    """``*.zarr`` groups (and any directory holding a ``zarr.json``)."""

    name: SegmentFormat = "zarr"

    def named(self, path: str) -> bool:
        """``*.zarr`` (a trailing slash allowed)."""
        return path.rstrip("/").endswith(".zarr")

    def marked(self, storage: Storage, path: str) -> bool:
        """A ``zarr.json`` in the directory."""
        return storage.exists(f"{path}/zarr.json")

    def inspect(self, storage: Storage, rel: str) -> SegmentInfo:
        """Columns, length and chunking from the group (fingerprinted; arrays, chunk-file
        plans and the listing cached)."""
        listing = storage.list_prefix(rel)
        if not any(p == f"{rel}/zarr.json" for p, _ in listing):
            raise segment_problem(f"segment {rel!r} does not exist (no {rel}/zarr.json)",
                                 path=rel)
        docs, fingerprint = _fingerprint(storage, rel, listing)
        layout = layout_from_docs(rel, docs)
        if layout is not None:  # a plain group: its documents say it all, no zarr open
            n, chunk_len = layout.row_count, layout.chunk_len
            info = SegmentInfo(rel, self.name, n, layout.columns,
                               tuple(min(chunk_len, n - s) for s in range(0, n, chunk_len)),
                               fingerprint)
            self._remember(storage, info, listing, docs)
            return info
        group = storage.open_zarr(rel)
        arrays = dict(group.arrays())
        if not arrays:
            raise segment_problem(f"zarr segment {rel!r} holds no arrays", path=rel)
        order = group.attrs.get("columns")
        names = (
            [str(n) for n in order]
            if isinstance(order, list) and sorted(map(str, order)) == sorted(arrays)
            else sorted(arrays)
        )
        lengths = {}
        columns = []
        chunk_len = 0
        for name in names:
            arr = arrays[name]
            if arr.ndim != 1:
                raise segment_problem(
                    f"zarr segment {rel!r}: array {name!r} has shape {arr.shape}, "
                    "columns must be 1-D",
                    path=rel,
                )
            lengths[name] = int(arr.shape[0])
            chunk_len = max(chunk_len, int((arr.shards or arr.chunks)[0]))
            try:
                dtype = pa.from_numpy_dtype(np.dtype(arr.dtype))
                columns.append(ColumnInfo(name, str(dtype), is_numeric(dtype)))
            except (TypeError, pa.ArrowNotImplementedError):
                columns.append(ColumnInfo(name, str(arr.dtype), numeric=False))
        if len(set(lengths.values())) > 1:
            raise segment_problem(
                f"zarr segment {rel!r}: arrays have different lengths {lengths}", path=rel
            )
        n = next(iter(lengths.values()))
        chunk_len = max(chunk_len, 1)
        chunks = tuple(min(chunk_len, n - s) for s in range(0, n, chunk_len))
        info = SegmentInfo(rel, self.name, n, tuple(columns), chunks, fingerprint)
        cache_put(("zarr", storage.uri, rel, info.fingerprint), {k: arrays[k] for k in names})
        self._remember(storage, info, listing, docs)
        return info

    def _remember(self, storage: Storage, info: SegmentInfo, listing: list[tuple[str, int]],
                  docs: dict[str, bytes]) -> None:
        """Cache the listing (verification) and the columns' chunk-file plans."""
        rel = info.path
        cache_put(("zarr-ok", storage.uri, rel, info.fingerprint), dict(listing))
        cache_put(("zplan", storage.uri, rel, info.fingerprint), {
            c.name: column_plan(f"{rel}/{c.name}", docs.get(f"{rel}/{c.name}/zarr.json", b"{}"))
            for c in info.columns
        })

    def verify(self, storage: Storage, info: SegmentInfo) -> dict[str, int] | None:
        """The group listed once per process; returns the registered ``{file: size}``."""
        key = ("zarr-ok", storage.uri, info.path, info.fingerprint)
        sizes: dict[str, int] | None = cache_get(key)
        if sizes is None:
            listing = storage.list_prefix(info.path)
            if not any(p == f"{info.path}/zarr.json" for p, _ in listing):
                raise segment_problem(f"segment {info.path!r} does not exist (no zarr.json)",
                                     path=info.path)
            try:
                _, fingerprint = _fingerprint(storage, info.path, listing)
            except FileNotFoundError:
                fingerprint = ""
            if fingerprint != info.fingerprint:
                raise segment_changed(info, "its files or their sizes differ")
            sizes = dict(listing)
            cache_put(key, sizes)
        return sizes

    def forget_verified(self, storage: Storage, info: SegmentInfo) -> None:
        """Drop the memo of the group's listing."""
        cache_forget(("zarr-ok", storage.uri, info.path, info.fingerprint))

    def read_chunk(self, storage: Storage, info: SegmentInfo, chunk_idx: int,
                   names: list[str], *, sizes: dict[str, int] | None) -> dict[str, np.ndarray]:
        """Chunk files read and decoded directly where the layout allows, else via zarr."""
        plans = _plans(storage, info, names)
        start = int(info.chunk_starts[chunk_idx])
        stop = start + info.chunk_rows[chunk_idx]
        out: dict[str, np.ndarray] = {}
        slow: list[str] = []
        for name in names:
            plan: ZarrColumnPlan | None = plans.get(name)
            if plan is not None and plan.length == info.row_count and (
                len(info.chunk_rows) == 1 or plan.chunk_len == info.chunk_rows[0]
            ):
                out[name] = read_chunk_file(storage, plan, chunk_idx, sizes=sizes)
            else:
                slow.append(name)
        if slow:
            out.update(self._rows(storage, info, start, stop, slow))
        return {name: out[name] for name in names}

    def ahead_reads(self, storage: Storage, info: SegmentInfo, chunk_idx: int,
                    names: list[str]) -> list[AheadRead]:
        """The chunk files :meth:`read_chunk` reads directly, whole (a column read through
        zarr's array API is left to it)."""
        plans = _plans(storage, info, names)
        reads = []
        for name in names:
            plan: ZarrColumnPlan | None = plans.get(name)
            if plan is not None and plan.length == info.row_count and (
                len(info.chunk_rows) == 1 or plan.chunk_len == info.chunk_rows[0]
            ):
                reads.append(AheadRead(f"{plan.prefix}{chunk_idx}", _whole))
        return reads

    def read_rows(self, storage: Storage, info: SegmentInfo, start: int, stop: int,
                  names: list[str], *, by_chunk: ChunkReader) -> dict[str, np.ndarray]:
        """The rows through zarr's array API (any range in one call)."""
        del by_chunk  # zarr slices rows directly
        return self._rows(storage, info, start, stop, names)

    @staticmethod
    def _rows(storage: Storage, info: SegmentInfo, start: int, stop: int,
              names: list[str]) -> dict[str, np.ndarray]:
        arrays = _arrays(storage, info)
        out = {}
        for name in names:
            if name not in arrays:
                raise segment_problem(f"zarr segment {info.path!r} lost column {name!r}",
                                     path=info.path)
            out[name] = np.asarray(arrays[name][start:stop], dtype=np.float64)
        return out


ZARR = ZarrFormat()
