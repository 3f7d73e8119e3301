"""Normalized segments: one parquet file or one zarr v3 group holding rows of one stream.

A zarr v3 segment is a group directory with one 1-D array per column, rows on
axis 0, every array the same length; nulls in zarr are float NaN (integer zarr
arrays cannot hold nulls). The group attribute ``columns`` (a list of names), when
present, fixes the column order; otherwise it is sorted by name.

``chunk_rows`` are the natural read units: parquet row groups, zarr chunks (or
shards) along axis 0. The Flight server caches decoded chunks from
:func:`read_chunk`, which always returns float64 with NaN for null.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services.contract.errors import ErrorType, WindpipeError
from services.logging import get_logger
from services.storage.store import PathEscapeError, Storage
from services.storage.zarr_chunks import (
    ChunkFileChanged,
    ZarrColumnPlan,
    column_plan,
    read_chunk_file,
)

__all__ = [
    "ColumnInfo",
    "SegmentChanged",
    "SegmentInfo",
    "SegmentProblem",
    "inspect_segment",
    "read_chunk",
    "read_rows",
    "segment_format",
    "verify_segment",
]

_log = get_logger("windpipe.storage")

SegmentFormat = Literal["parquet", "zarr"]
_TAIL_BYTES = 64 * 1024
_CACHE_ENTRIES = 512


class SegmentProblem(WindpipeError):  # noqa: N818 (the name callers know)
    """A segment that is missing, unreadable, corrupt or malformed (``segment_error``)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(ErrorType.SEGMENT_ERROR, message, {"path": path} if path else {})


class SegmentChanged(WindpipeError):  # noqa: N818 (the name of its ErrorType)
    """A segment that no longer matches its registration fingerprint (``segment_changed``):
    rewritten, truncated or removed under an immutable version."""

    def __init__(self, info: SegmentInfo, why: str) -> None:
        super().__init__(
            ErrorType.SEGMENT_CHANGED,
            f"segment {info.path!r} changed since its version was registered ({why}); "
            "windpipe will not serve different data under the same version id",
            {"path": info.path, "fingerprint": info.fingerprint, "why": why},
        )


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One column: name, arrow type string (``"float"``, ``"double"``, ``"int64"``...), and
    whether :func:`read_chunk` can read it as float64 (integers, floats, booleans, decimals).
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
        """The column called ``name``; :class:`SegmentProblem` if there is none."""
        for col in self.columns:
            if col.name == name:
                return col
        raise SegmentProblem(
            f"segment {self.path!r} has no column {name!r} (it has "
            f"{[c.name for c in self.columns]})",
            path=self.path,
        )


def _is_numeric(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_decimal(dtype)
    )


def segment_format(storage: Storage, path: str) -> SegmentFormat:
    """``zarr`` for ``*.zarr`` paths or directories holding a ``zarr.json``, else ``parquet``."""
    if path.rstrip("/").endswith(".zarr"):
        return "zarr"
    if path.endswith((".parquet", ".pq")):
        return "parquet"
    return "zarr" if storage.exists(f"{path}/zarr.json") else "parquet"


def inspect_segment(storage: Storage, path: str) -> SegmentInfo:
    """Open a segment, check it and describe it; :class:`SegmentProblem` on any defect."""
    try:
        rel = storage.validate_relative_path(path)
    except PathEscapeError as exc:
        raise SegmentProblem(str(exc), path=path) from exc
    try:
        if segment_format(storage, rel) == "zarr":
            return _inspect_zarr(storage, rel)
        return _inspect_parquet(storage, rel)
    except SegmentProblem:
        raise
    except WindpipeError as exc:
        if exc.type == ErrorType.UNAVAILABLE:
            raise  # the store did not answer: retry later, the segment may be fine
        raise SegmentProblem(f"segment {rel!r}: {exc.message}", path=rel) from exc
    except FileNotFoundError as exc:
        raise SegmentProblem(f"segment {rel!r} does not exist", path=rel) from exc
    except Exception as exc:
        _log.warning("segment.unreadable", path=rel, error=f"{type(exc).__name__}: {exc}")
        raise SegmentProblem(
            f"segment {rel!r} cannot be read as parquet or zarr v3 ({type(exc).__name__}; "
            "the server log has the details)", path=rel
        ) from exc


def _parquet_footer(storage: Storage, rel: str, size: int) -> tuple[bytes, str]:
    """The tail bytes read and the fingerprint (a digest of size and footer)."""
    if size < 12:
        raise SegmentProblem(f"segment {rel!r} is not a parquet file ({size} bytes)", path=rel)
    tail = storage.get_range(rel, max(0, size - _TAIL_BYTES), size)
    if tail[-4:] != b"PAR1":
        raise SegmentProblem(f"segment {rel!r} is not a parquet file (no PAR1 footer)", path=rel)
    footer_len = int.from_bytes(tail[-8:-4], "little")
    if footer_len + 8 > size - 4:
        raise SegmentProblem(f"segment {rel!r} has a corrupt parquet footer", path=rel)
    if footer_len + 8 <= len(tail):
        footer = tail[len(tail) - footer_len - 8 :]
    else:
        footer = storage.get_range(rel, size - footer_len - 8, size)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(b"parquet\0" + str(size).encode() + b"\0" + footer)
    return tail, digest.hexdigest()


def _inspect_parquet(storage: Storage, rel: str) -> SegmentInfo:
    size, token = storage.version_token(rel)
    tail, fingerprint = _parquet_footer(storage, rel, size)
    with storage.open_parquet(rel, tail=tail) as pf:
        meta = pf.metadata
        schema = pf.schema_arrow
    columns = tuple(ColumnInfo(f.name, str(f.type), _is_numeric(f.type)) for f in schema)
    chunks = tuple(int(meta.row_group(i).num_rows) for i in range(meta.num_row_groups))
    info = SegmentInfo(rel, "parquet", int(meta.num_rows), columns, chunks, fingerprint)
    _cache_put(("pq", storage.uri, rel, info.fingerprint), meta)
    _cache_put(("pq-ok", storage.uri, rel, info.fingerprint), (size, token))
    return info


def _inspect_zarr(storage: Storage, rel: str) -> SegmentInfo:
    listing = storage.list_prefix(rel)
    if not any(p == f"{rel}/zarr.json" for p, _ in listing):
        raise SegmentProblem(f"segment {rel!r} does not exist (no {rel}/zarr.json)", path=rel)
    docs, fingerprint = _zarr_fingerprint(storage, rel, listing)
    group = storage.open_zarr(rel)
    arrays = dict(group.arrays())
    if not arrays:
        raise SegmentProblem(f"zarr segment {rel!r} holds no arrays", path=rel)
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
            raise SegmentProblem(
                f"zarr segment {rel!r}: array {name!r} has shape {arr.shape}, columns must be 1-D",
                path=rel,
            )
        lengths[name] = int(arr.shape[0])
        chunk_len = max(chunk_len, int((arr.shards or arr.chunks)[0]))
        try:
            dtype = pa.from_numpy_dtype(np.dtype(arr.dtype))
            columns.append(ColumnInfo(name, str(dtype), _is_numeric(dtype)))
        except (TypeError, pa.ArrowNotImplementedError):
            columns.append(ColumnInfo(name, str(arr.dtype), numeric=False))
    if len(set(lengths.values())) > 1:
        raise SegmentProblem(
            f"zarr segment {rel!r}: arrays have different lengths {lengths}", path=rel
        )
    n = next(iter(lengths.values()))
    chunk_len = max(chunk_len, 1)
    chunks = tuple(min(chunk_len, n - s) for s in range(0, n, chunk_len))
    info = SegmentInfo(rel, "zarr", n, tuple(columns), chunks, fingerprint)
    _cache_put(("zarr-ok", storage.uri, rel, fingerprint), dict(listing))
    _cache_put(("zarr", storage.uri, rel, info.fingerprint), {k: arrays[k] for k in names})
    _cache_put(("zplan", storage.uri, rel, info.fingerprint), {
        k: column_plan(f"{rel}/{k}", docs.get(f"{rel}/{k}/zarr.json", b"{}")) for k in names
    })
    return info


def _zarr_fingerprint(
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


def verify_segment(storage: Storage, info: SegmentInfo) -> dict[str, int] | None:
    """Check that ``info``'s segment still matches its registration fingerprint.

    Raises :class:`SegmentChanged` (:class:`SegmentProblem` when it is gone). Called on
    every chunk load, so it is cheap when nothing changed: a parquet file costs one
    ``stat`` (size, inode, mtime) on a local disk or one ``head`` (size, e-tag) on S3,
    and its footer is re-hashed only when those differ from the last match; a zarr
    group is listed once per process, then each chunk file read is checked against
    its registered size (returned: ``{file: size}``).
    """
    if info.format == "parquet":
        try:
            size, token = storage.version_token(info.path)
        except FileNotFoundError:
            raise SegmentProblem(f"segment {info.path!r} does not exist",
                                 path=info.path) from None
        key = ("pq-ok", storage.uri, info.path, info.fingerprint)
        if _cache_get(key) == (size, token):
            return None
        try:
            _, fingerprint = _parquet_footer(storage, info.path, size)
        except (SegmentProblem, FileNotFoundError, OSError):
            fingerprint = ""
        if fingerprint != info.fingerprint:
            raise SegmentChanged(info, f"now {size} bytes, footer differs")
        _cache_put(key, (size, token))
        return None
    key = ("zarr-ok", storage.uri, info.path, info.fingerprint)
    sizes: dict[str, int] | None = _cache_get(key)
    if sizes is None:
        listing = storage.list_prefix(info.path)
        if not any(p == f"{info.path}/zarr.json" for p, _ in listing):
            raise SegmentProblem(f"segment {info.path!r} does not exist (no zarr.json)",
                                 path=info.path)
        try:
            _, fingerprint = _zarr_fingerprint(storage, info.path, listing)
        except FileNotFoundError:
            fingerprint = ""
        if fingerprint != info.fingerprint:
            raise SegmentChanged(info, "its files or their sizes differ")
        sizes = dict(listing)
        _cache_put(key, sizes)
    return sizes


_cache: OrderedDict[tuple[str, ...], Any] = OrderedDict()
_cache_lock = threading.Lock()


def _cache_get(key: tuple[str, ...]) -> Any:
    with _cache_lock:
        value = _cache.get(key)
        if value is not None:
            _cache.move_to_end(key)
        return value


def _cache_put(key: tuple[str, ...], value: Any) -> None:
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)


def _to_float64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if not pa.types.is_float64(column.type):
        column = pc.cast(column, pa.float64())
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    out = column.to_numpy(zero_copy_only=False)
    return np.asarray(out, dtype=np.float64)


def _check_columns(info: SegmentInfo, columns: tuple[str, ...] | list[str]) -> list[str]:
    names = list(dict.fromkeys(columns))
    for name in names:
        col = info.column(name)
        if not col.numeric:
            raise SegmentProblem(
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
        raise SegmentProblem(
            f"segment {info.path!r} has {len(info.chunk_rows)} chunks, no chunk {chunk_idx}",
            path=info.path,
        )
    names = _check_columns(info, columns)
    try:
        sizes = verify_segment(storage, info)
        if info.format == "parquet":
            return _read_parquet_chunk(storage, info, chunk_idx, names)
        return _read_zarr_chunk(storage, info, chunk_idx, names, sizes)
    except SegmentChanged:
        raise
    except WindpipeError as exc:
        if exc.type == ErrorType.UNAVAILABLE:
            raise
        _forget_verified(storage, info)
        verify_segment(storage, info)  # a file changed under the read: say so
        raise
    except (ChunkFileChanged, OSError, pa.ArrowException) as exc:
        _forget_verified(storage, info)
        verify_segment(storage, info)  # a file changed under the read: say so
        if isinstance(exc, ChunkFileChanged):
            raise SegmentChanged(info, str(exc)) from exc
        raise SegmentProblem(
            f"reading chunk {chunk_idx} of segment {info.path!r} failed: "
            f"{type(exc).__name__}: {exc}",
            path=info.path,
        ) from exc
    except Exception as exc:
        _log.warning("segment.chunk_unreadable", path=info.path, chunk=chunk_idx,
                     error=f"{type(exc).__name__}: {exc}")
        raise SegmentProblem(
            f"reading chunk {chunk_idx} of segment {info.path!r} failed "
            f"({type(exc).__name__}; the server log has the details)",
            path=info.path,
        ) from exc


def _read_parquet_chunk(
    storage: Storage, info: SegmentInfo, chunk_idx: int, names: list[str]
) -> dict[str, np.ndarray]:
    key = ("pq", storage.uri, info.path, info.fingerprint)
    meta = _cache_get(key)
    with storage.open_parquet(info.path, metadata=meta) as pf:
        if meta is None:
            _cache_put(key, pf.metadata)
        if pf.metadata.num_row_groups != len(info.chunk_rows):
            raise SegmentProblem(
                f"segment {info.path!r} changed since registration "
                f"({pf.metadata.num_row_groups} row groups, expected {len(info.chunk_rows)})",
                path=info.path,
            )
        table = pf.read_row_group(chunk_idx, columns=names)
    return {name: _to_float64(table.column(name)) for name in names}


def _zarr_arrays(storage: Storage, info: SegmentInfo) -> dict[str, Any]:
    key = ("zarr", storage.uri, info.path, info.fingerprint)
    arrays = _cache_get(key)
    if arrays is None:
        arrays = dict(storage.open_zarr(info.path).arrays())
        _cache_put(key, arrays)
    return dict(arrays)


def _zarr_plans(storage: Storage, info: SegmentInfo, names: list[str]) -> dict[str, Any]:
    key = ("zplan", storage.uri, info.path, info.fingerprint)
    plans = _cache_get(key)
    if plans is None or any(n not in plans for n in names):
        plans = dict(plans or {})
        for name in names:
            try:
                doc = storage.get(f"{info.path}/{name}/zarr.json")
            except FileNotFoundError:
                doc = b"{}"
            plans[name] = column_plan(f"{info.path}/{name}", doc)
        _cache_put(key, plans)
    return dict(plans)


def _forget_verified(storage: Storage, info: SegmentInfo) -> None:
    kind = "pq-ok" if info.format == "parquet" else "zarr-ok"
    with _cache_lock:
        _cache.pop((kind, storage.uri, info.path, info.fingerprint), None)


def _read_zarr_chunk(
    storage: Storage, info: SegmentInfo, chunk_idx: int, names: list[str],
    sizes: dict[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Chunk files read and decoded directly where the layout allows, else via zarr."""
    plans = _zarr_plans(storage, info, names)
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
        out.update(_read_zarr_rows(storage, info, start, stop, slow))
    return {name: out[name] for name in names}


def _read_zarr_rows(
    storage: Storage, info: SegmentInfo, start: int, stop: int, names: list[str]
) -> dict[str, np.ndarray]:
    arrays = _zarr_arrays(storage, info)
    out = {}
    for name in names:
        if name not in arrays:
            raise SegmentProblem(f"zarr segment {info.path!r} lost column {name!r}", path=info.path)
        out[name] = np.asarray(arrays[name][start:stop], dtype=np.float64)
    return out


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
    if info.format == "zarr":
        return _read_zarr_rows(storage, info, start, stop, names)
    starts = info.chunk_starts
    first = int(np.searchsorted(starts, start, side="right") - 1)
    last = int(np.searchsorted(starts, stop, side="left") - 1)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for idx in range(first, last + 1):
        chunk = read_chunk(storage, info, idx, names)
        lo = max(start, int(starts[idx])) - int(starts[idx])
        hi = min(stop, int(starts[idx + 1])) - int(starts[idx])
        for name in names:
            parts[name].append(chunk[name][lo:hi])
    return {name: np.concatenate(parts[name]) for name in names}

