"""Packs: the rows of a version's small local parquet segments, written once by registration.

A block fill over many small segments pays per file an open, a footer and pyarrow's
reader setup (~140 us for a 60-row file, measured), whatever the rows. Registration
already reads each small file whole and decodes its numeric columns for the profile
(``ParquetFormat.inspect_values``, stacked by ``windpipe.catalog.figures.count_group``), so it
also writes those columns, as float64 (what a chunk read gives,
:func:`~services.storage.formats.base.to_float64`), into a few large files of its own.
A reader then takes a run of small segments' rows from them with one gather a column::

    <pack dir>/<version id>/index.arrow   one row a packed segment: path, fingerprint,
                                          size, inode and mtime at registration,
                                          data file, first row, rows (Arrow IPC file)
    <pack dir>/<version id>/rows-<k>.arrow  one record batch of float64 columns (the
                                          packed columns of one column set)
    <pack dir>/.tmp-<pid>-<uuid>/          a pack being written

Rules a reader can rely on:

* a pack is written under a temporary name and renamed into place once its version is
  stored, never modified after: a mapped file cannot turn into a SIGBUS; a
  registration that fails leaves no pack, and the same content registered twice keeps
  the first;
* a segment's rows are taken from the pack only when its registered fingerprint is
  the plan's and one ``stat`` finds the file's size, inode and modification time as
  registration read them, the documented immutability check of
  a chunk read (docs/operations.md); otherwise, or when a column asked for is not
  packed (an integer column whose nulls the footer counts is not decoded), or the pack
  is missing or unreadable, the segment is read from its file as before, with that
  read's checks and errors;
* packs are an acceleration only: a Flight server that cannot see the catalog's pack
  directory reads the segments.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windpipe.services.arrow_values import from_numpy, string_array, to_numpy
from windpipe.services.logging import get_logger
from windpipe.services.memo import Memo
from windpipe.services.settings import Settings
from windpipe.services.storage.formats.base import SegmentInfo

__all__ = [
    "FILE_ROWS", "PACK_FORMAT", "PACK_ROWS", "PackStore", "PackWriter", "PackedPieces",
    "Read", "VersionPack",
]

PACK_FORMAT = 1
PACK_ROWS = 8192  # segments of at most this many rows are packed (a file's overheads dominate)
FILE_ROWS = 1 << 16  # rows a data file gathers before it is written
_INDEX = "index.arrow"
_META = b"windpipe.pack"
_VERSION_ID = re.compile(r"v-[0-9a-f]{32}")
_STALE_TMP_S = 86400.0
_OPEN_PACKS = 8

_log = get_logger("windpipe.packs")

@dataclass(frozen=True, eq=False)
class PackStore:
    """The directory of packs and which segments go in one (``max_rows``; 0: none)."""

    directory: Path
    max_rows: int = PACK_ROWS
    _open: Memo[tuple[str, str], VersionPack] = field(
        default_factory=lambda: Memo(_OPEN_PACKS), repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> PackStore:
        """``WINDPIPE_PACK_DIR`` and ``WINDPIPE_PACK_ROWS``."""
        return cls(settings.resolved_pack_dir(), max_rows=settings.pack_rows)

    def writer(self, root_uri: str) -> PackWriter | None:
        """A writer for one registration under ``root_uri`` (None: packing is off)."""
        if self.max_rows <= 0:
            return None
        try:
            return PackWriter(self, root_uri)
        except OSError as exc:
            _log.warning("packs.unwritable", error=f"{type(exc).__name__}: {exc}")
            return None

    def open(self, version_id: str, root_uri: str) -> VersionPack | None:
        """The pack of ``version_id`` over ``root_uri``; None when there is none (yet: a
        version is stored before its pack is renamed into place) or it is unreadable
        (logged). A pack found is kept open for the next plans of the version."""
        if not _VERSION_ID.fullmatch(version_id):
            return None
        key = (version_id, root_uri)
        with contextlib.suppress(KeyError):
            return self._open.peek(key)
        found = VersionPack.load(self.directory / version_id, root_uri)
        if found is not None:
            self._open.put(key, found)
        return found

    def remove(self, version_id: str) -> bool:
        """Remove ``version_id``'s pack (its version retired); whether there was one. It
        is renamed away first, so no reader ever opens half of it; a process that mapped
        its files keeps their pages until it unmaps them (POSIX)."""
        if not _VERSION_ID.fullmatch(version_id):
            return False
        away = self.directory / f".tmp-removed-{uuid.uuid4().hex}"
        try:
            (self.directory / version_id).rename(away)
        except OSError:
            return False
        shutil.rmtree(away, ignore_errors=True)
        self._open.forget_where(lambda key: key[0] == version_id)
        return True

    def sweep(self, *, older_than_s: float = _STALE_TMP_S) -> int:
        """Remove packs left half-written (a process killed mid-registration) more than
        ``older_than_s`` ago; the count removed."""
        removed = 0
        with contextlib.suppress(OSError):
            for entry in self.directory.glob(".tmp-*"):
                with contextlib.suppress(OSError):
                    if time.time() - entry.stat().st_mtime > older_than_s:
                        shutil.rmtree(entry)
                        removed += 1
        return removed


Read = tuple[SegmentInfo, int, str]
"""A segment registration read whole: its description, and the size and version token
(``Storage.version_token``'s form) of the bytes read."""


class PackWriter:
    """The pack of one registration, filled from its segment checks' threads
    (:meth:`add_columns`) and renamed into place by
    :meth:`commit`, or removed by :meth:`abort`. A write that fails (a full disk) turns
    the writer off and registration goes on without a pack."""

    def __init__(self, store: PackStore, root_uri: str) -> None:
        self._store = store
        self._root = root_uri
        self._tmp = store.directory / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"
        self._tmp.mkdir(parents=True)
        self._lock = threading.Lock()
        # per column set: the segments pending and their float64 columns, part by part
        self._pending: dict[tuple[str, ...], list[tuple[list[Read], list[np.ndarray]]]] = {}
        self._pending_rows: dict[tuple[str, ...], int] = {}
        self._files: list[dict[str, object]] = []
        self._index: dict[str, list[object]] = {k: [] for k in (
            "path", "fingerprint", "size", "inode", "mtime_ns", "file", "start", "rows")}
        self._seen: set[str] = set()
        self._failed = False

    def add_columns(self, reads: Sequence[Read | None], names: tuple[str, ...],
                    columns: Sequence[np.ndarray], offsets: np.ndarray) -> None:
        """Pack segments from their stacked columns (registration's counted group:
        segment ``k``'s rows at ``offsets[k]:offsets[k + 1]`` of each of ``columns``,
        named ``names``, any float type, null as NaN); ``reads[k]`` None (not read whole
        here), a segment of more than ``max_rows`` rows or none, or one already packed is
        left out. The conversion to float64 runs on the caller's thread."""
        if not names or self._failed:
            return
        limit = self._store.max_rows
        kept: list[Read] = []
        keep: list[int] = []
        for k, read in enumerate(reads):
            if read is not None and 0 < read[0].row_count <= limit \
                    and read[0].row_count == int(offsets[k + 1] - offsets[k]):
                kept.append(read)
                keep.append(k)
        if not keep:
            return
        if len(keep) == len(reads):
            parts = [np.asarray(c, dtype=np.float64) for c in columns]
        else:
            take = np.concatenate([np.arange(offsets[k], offsets[k + 1]) for k in keep])
            parts = [np.asarray(c[take], dtype=np.float64) for c in columns]
        with self._lock:
            if self._failed:
                return
            if any(read[0].path in self._seen for read in kept):
                return  # a path twice: registration refuses it; nothing packed for it
            try:
                self._seen.update(read[0].path for read in kept)
                self._pending.setdefault(names, []).append((kept, parts))
                rows = self._pending_rows.get(names, 0) + parts[0].shape[0]
                self._pending_rows[names] = rows
                if rows >= FILE_ROWS:
                    self._flush(names)
            except (OSError, pa.ArrowException) as exc:
                self._fail(exc)

    def commit(self, version_id: str) -> bool:
        """Write what is pending and the index, and rename the pack into place as
        ``version_id``'s; False when nothing was packed, a pack of it exists already, or
        writing failed (the temporary files are removed)."""
        with self._lock:
            try:
                if self._failed or not _VERSION_ID.fullmatch(version_id):
                    return False
                for key in list(self._pending):
                    self._flush(key)
                if not self._index["path"]:
                    return False
                self._write_index()
                target = self._store.directory / version_id
                try:
                    self._tmp.rename(target)
                except OSError:  # already there (the same content registered before)
                    return False
                return True
            except (OSError, pa.ArrowException) as exc:
                self._fail(exc)
                return False
            finally:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def abort(self) -> None:
        """Remove what was written (the registration failed)."""
        with self._lock:
            self._failed = True
            self._pending.clear()
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _flush(self, key: tuple[str, ...]) -> None:
        pending = self._pending.pop(key)
        self._pending_rows.pop(key, None)
        names = list(key)
        columns = [np.concatenate([part[1][j] for part in pending]) if len(pending) > 1
                   else pending[0][1][j] for j in range(len(names))]
        number = len(self._files)
        batch = pa.record_batch([from_numpy(c) for c in columns], names=names)
        _write_ipc(self._tmp / f"rows-{number}.arrow", batch)
        self._files.append({"columns": names, "rows": batch.num_rows})
        start = 0
        index = self._index
        for reads, _parts in pending:
            for info, size, token in reads:
                inode, mtime = (int(x, 16) for x in token.split("-"))  # version_token's form
                for name, value in (("path", info.path), ("fingerprint", info.fingerprint),
                                    ("size", size), ("inode", inode), ("mtime_ns", mtime),
                                    ("file", number), ("start", start),
                                    ("rows", info.row_count)):
                    index[name].append(value)
                start += info.row_count

    def _write_index(self) -> None:
        index = self._index
        types = {"path": pa.string(), "fingerprint": pa.string(), "size": pa.int64(),
                 "inode": pa.uint64(), "mtime_ns": pa.int64(), "file": pa.int32(),
                 "start": pa.int64(), "rows": pa.int64()}
        meta = json.dumps({"format": PACK_FORMAT, "root": self._root, "files": self._files})
        schema = pa.schema(list(types.items()), metadata={_META: meta})
        batch = pa.record_batch(
            [string_array(map(str, index[k])) if t == pa.string()
             else from_numpy(np.asarray(index[k], dtype=t.to_pandas_dtype()))
             for k, t in types.items()], schema=schema)
        _write_ipc(self._tmp / _INDEX, batch)

    def _fail(self, exc: BaseException) -> None:
        _log.warning("packs.write_failed", error=f"{type(exc).__name__}: {exc}")
        self._failed = True
        self._pending.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)


@dataclass(frozen=True, eq=False)
class PackedPieces:
    """Where a plan's pieces are in a version's pack, per piece (length P): ``file`` (its
    data file; -1: not packed, or packed with another fingerprint), ``start`` (its first
    row there) and the ``size``, ``inode`` and ``mtime_ns`` registration read."""

    file: np.ndarray  # int32 [P]
    start: np.ndarray  # int64 [P]
    size: np.ndarray  # int64 [P]
    inode: np.ndarray  # uint64 [P]
    mtime_ns: np.ndarray  # int64 [P]

    def unchanged(self, local_root: str, paths: Sequence[str], pieces: np.ndarray) -> np.ndarray:
        """bool per piece of ``pieces``: one ``stat`` finds its file as registration read
        it (size, inode, modification time)."""
        wanted = list(zip(self.size[pieces].tolist(), self.inode[pieces].tolist(),
                          self.mtime_ns[pieces].tolist(), strict=True))
        out = np.zeros(pieces.shape[0], dtype=bool)
        for i, p in enumerate(pieces.tolist()):
            try:
                st = os.stat(f"{local_root}/{paths[p]}")
            except OSError:
                continue
            out[i] = (st.st_size, st.st_ino, st.st_mtime_ns) == wanted[i]
        return out


class VersionPack:
    """A version's pack, mapped read-only: where each packed segment's rows are."""

    def __init__(self, directory: Path, index: pa.RecordBatch,
                 files: list[dict[str, object]]) -> None:
        self._directory = directory
        self._files = files
        self._index = index
        self._columns: dict[int, dict[str, np.ndarray]] = {}
        self._broken: set[int] = set()
        self._names = [frozenset(str(c) for c in f["columns"]) for f in files]  # type: ignore[attr-defined]
        self._lock = threading.Lock()

    @classmethod
    def load(cls, directory: Path, root_uri: str) -> VersionPack | None:
        """The pack in ``directory`` written for ``root_uri``; None when there is none or
        it is not one this code reads."""
        path = directory / _INDEX
        if not path.is_file():
            return None
        try:
            with pa.memory_map(str(path)) as source:
                reader = pa.ipc.open_file(source)
                meta = json.loads((reader.schema.metadata or {})[_META])
                index = reader.get_batch(0) if reader.num_record_batches else None
            if (meta.get("format") != PACK_FORMAT or meta.get("root") != root_uri
                    or index is None):
                return None
            return cls(directory, index, list(meta["files"]))
        except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
            _log.warning("packs.unreadable", pack=directory.name,
                         error=f"{type(exc).__name__}: {exc}")
            return None

    def pieces(self, paths: Sequence[str] | pa.Array,
               fingerprints: Sequence[str] | pa.Array) -> PackedPieces:
        """Where the segments ``paths`` (with the registered ``fingerprints``) are in this
        pack, once a plan: one hash lookup in Arrow for them all (a plan artifact hands
        its own string arrays, so no Python string is made)."""
        path_arr, fp_arr = _strings(paths), _strings(fingerprints)
        index = self._index
        n = len(path_arr)
        if not n or not index.num_rows:
            k = np.full(n, -1, dtype=np.int64)
        else:
            k = to_numpy(pc.index_in(path_arr, value_set=index.column("path")),
                         null=-1).astype(np.int64)
        found = k >= 0
        at = np.where(found, k, 0)
        if found.any():
            same = found & to_numpy(pc.equal(index.column("fingerprint").take(from_numpy(at)),
                                             fp_arr), null=False)
        else:
            same = found
        return PackedPieces(
            file=np.where(same, to_numpy(index.column("file"))[at], -1).astype(np.int32),
            start=to_numpy(index.column("start"))[at],
            size=to_numpy(index.column("size"))[at],
            inode=to_numpy(index.column("inode"))[at],
            mtime_ns=to_numpy(index.column("mtime_ns"))[at],
        )

    def files_with(self, names: frozenset[str]) -> np.ndarray:
        """bool per data file: it holds every column of ``names`` and can be mapped."""
        return np.asarray([names <= cols and self._map(f) for f, cols in enumerate(self._names)],
                          dtype=bool)

    def columns(self, file: int) -> dict[str, np.ndarray]:
        """The float64 columns of data file ``file`` (views of the mapped file; a file
        :meth:`files_with` answered for is mapped)."""
        return self._columns[file]

    def _map(self, file: int) -> bool:
        """Map data file ``file`` (False, logged, and never tried again: unreadable)."""
        with self._lock:
            if file in self._columns:
                return True
            if file in self._broken:
                return False
            try:
                source = pa.memory_map(str(self._directory / f"rows-{file}.arrow"))
                batch = pa.ipc.open_file(source).get_batch(0)
                if batch.num_rows != self._files[file]["rows"]:
                    raise ValueError(f"{batch.num_rows} rows, not {self._files[file]['rows']}")
                self._columns[file] = {name: to_numpy(batch.column(name))
                                       for name in batch.schema.names}
                return True
            except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
                _log.warning("packs.unreadable", pack=self._directory.name, file=file,
                             error=f"{type(exc).__name__}: {exc}")
                self._broken.add(file)
                return False


def _write_ipc(path: Path, batch: pa.RecordBatch) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def _strings(values: Sequence[str] | pa.Array) -> pa.Array:
    """``values`` as an Arrow string array (an Arrow one is taken as it is, or cast)."""
    if not isinstance(values, pa.Array):
        return string_array(values)
    return values if values.type == pa.string() else values.cast(pa.string())
