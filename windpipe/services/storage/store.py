"""A dataset's storage root: local directories (``file://``) and S3 (``s3://bucket/prefix``).

Every path the catalog and the Flight server handle is *relative to the root* and
passes :meth:`Storage.validate_relative_path` first, so a manifest can never make
the services read outside the root (absolute paths, ``..``, URL schemes, and for
local roots symlinks that resolve outside it raise :class:`PathEscapeError`).

All I/O goes through obstore, whose stores are safe to share between threads, so
one :class:`Storage` serves any number of concurrent readers. S3 credentials come
from configuration only: ``StorageOptions`` (``WINDPIPE_S3_ACCESS_KEY_ID`` / ``_SECRET_
ACCESS_KEY``) or the ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` variables the
operator set. Without either, requests go unsigned rather than to the cloud's instance
metadata endpoint, unless ``s3_instance_credentials`` opts in. :func:`open_root`
checks the operator's :class:`windpipe.services.storage.roots.AllowedRoots` before opening anything.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import obstore
import pyarrow as pa
import pyarrow.parquet as pq
from obstore.exceptions import GenericError, NotFoundError
from obstore.store import LocalStore, S3Store

from windpipe.services.contract.errors import InvalidRequest, Unavailable, WindpipeError
from windpipe.services.storage.concurrent import deadline_s, read_ranges
from windpipe.services.storage.held import HeldObject
from windpipe.services.storage.local_io import LinkCheck, read_local
from windpipe.services.storage.options import StorageOptions
from windpipe.services.storage.paths import PathEscapeError, normalized_path
from windpipe.services.storage.ranged import RangedReader
from windpipe.services.storage.readahead import AheadRead, ReadAhead

if TYPE_CHECKING:  # zarr's import costs half a second; the read path never needs it
    import zarr
    import zarr.storage

__all__ = [
    "ObjectMeta", "PathEscapeError", "Storage", "StorageOptions", "StorageRoots", "open_root",
]


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """Size in bytes and entity tag (``None`` where the store has none) of one object."""

    size: int
    e_tag: str | None


class Storage:
    """One storage root. Build it with :meth:`from_uri`."""

    def __init__(
        self,
        *,
        uri: str,
        store: Any,
        local_root: Path | None = None,
        s3_bucket: str | None = None,
        s3_prefix: str = "",
        s3_options: dict[str, Any] | None = None,
        options: StorageOptions | None = None,
    ) -> None:
        self._uri = uri
        self._store = store
        self._local_root = local_root
        self._s3_bucket = s3_bucket
        self._s3_prefix = s3_prefix
        self._s3_options = dict(s3_options or {})
        self._options = options or StorageOptions()
        self._aheads: list[ReadAhead] = []  # read-aheads running over this root
        self._aheads_lock = threading.Lock()
        self._held: Mapping[str, HeldObject] = {}  # see holding()
        self._has_link = None if local_root is None else LinkCheck(local_root)

    @classmethod
    def from_uri(cls, uri: str, options: StorageOptions | None = None) -> Storage:
        """Open ``file:///abs/dir`` (or a bare absolute directory) or ``s3://bucket/prefix``.

        A local root must be an existing directory. S3 credentials come from
        ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``);
        ``options.s3_endpoint`` points at S3-compatible servers (MinIO, moto), which
        usually need ``s3_allow_http=True``. A bad URI raises ``ValueError``.
        """
        options = options or StorageOptions()
        parsed = urlparse(uri)
        if parsed.scheme in ("", "file"):
            if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
                raise ValueError(f"file URIs must be absolute (file:///...), got {uri!r}")
            raw = unquote(parsed.path) if parsed.scheme == "file" else uri
            root = Path(raw)
            if not root.is_absolute():
                raise ValueError(f"a local storage root must be an absolute path, got {uri!r}")
            root = root.resolve()
            if not root.is_dir():
                raise ValueError(f"local storage root {str(root)!r} is not a directory")
            return cls(uri=root.as_uri(), store=LocalStore(root), local_root=root)
        if parsed.scheme in ("s3", "s3a"):
            bucket = parsed.netloc
            if not bucket:
                raise ValueError(f"s3 URI without a bucket: {uri!r}")
            prefix = parsed.path.strip("/")
            s3: dict[str, Any] = {"region": options.s3_region, **options.s3_credentials()}
            if options.s3_endpoint:
                s3["endpoint"] = options.s3_endpoint
            s3["client_options"] = options.client_options()
            s3["retry_config"] = options.retry_config()
            store = S3Store(bucket, prefix=prefix or None, **s3)
            norm = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
            return cls(uri=norm, store=store, s3_bucket=bucket, s3_prefix=prefix,
                       s3_options=s3, options=options)
        raise ValueError(f"unsupported storage URI {uri!r} (use file:// or s3://)")

    @property
    def uri(self) -> str:
        """The normalized root URI (``file:///...`` resolved, or ``s3://bucket[/prefix]``)."""
        return self._uri

    @property
    def is_local(self) -> bool:
        """True for a local directory root."""
        return self._local_root is not None

    @property
    def local_root(self) -> Path | None:
        """The resolved root directory of a local root, else ``None``."""
        return self._local_root

    @property
    def store(self) -> Any:
        """The underlying obstore store (for callers batching their own requests)."""
        return self._store

    def __repr__(self) -> str:
        return f"Storage({self._uri!r})"

    def holding(self, held: Mapping[str, HeldObject]) -> Storage:
        """A view of this root whose ``head``, ``get``, ``get_range`` (and the parquet
        reads built on them) answer from ``held`` (relative path -> the object as fetched
        moments ago, :func:`windpipe.services.storage.held.fetch_tails`) where it holds the bytes,
        from the store where not; the root itself is unchanged."""
        view = copy.copy(self)
        view._held = held
        return view

    def held(self, path: str) -> HeldObject | None:
        """What this view holds of ``path`` (:meth:`holding`), if anything."""
        return self._held.get(path) if self._held else None

    @property
    def deadline_s(self) -> float:
        """The longest one request may take, its retries included (``StorageOptions``)."""
        return self._deadline_s()

    def uri_for(self, path: str) -> str:
        """The absolute URI of a relative path."""
        return f"{self._uri.rstrip('/')}/{self.validate_relative_path(path)}"

    def _unavailable(self, rel: str, exc: Exception) -> Exception:
        """An object store that timed out or could not be reached: ``unavailable`` (retry
        later; connect and request timeouts: ``StorageOptions``). On a local root the same
        error class means the path cannot be read as asked (a file where a directory was
        expected): no such object. The store's own text stays out of the answer."""
        if self._local_root is not None:
            return FileNotFoundError(f"no object at {rel!r} under {self._uri}")
        return Unavailable(
            f"the object store of {self._uri} did not answer for {rel!r} "
            f"({type(exc).__name__})",
            details={"root": self._uri, "path": rel},
        )

    def validate_relative_path(self, path: str) -> str:
        """Check ``path`` and return its normalized form (``./`` and doubled ``/`` removed).

        Raises :class:`PathEscapeError` for non-strings, empty paths, absolute paths,
        backslashes, URL schemes, ``..`` components, control characters and (local
        roots) symlinks resolving outside the root.
        """
        norm = self._normalized(path)
        root = self._local_root
        if root is not None and self._has_link is not None and self._has_link(norm):
            resolved = (root / norm).resolve()
            if not resolved.is_relative_to(root):
                raise PathEscapeError(
                    f"path {path!r} resolves outside the storage root (a symlink)"
                )
        return norm

    def normalize_relative_path(self, path: str) -> str:
        """:meth:`validate_relative_path` without touching the file system: the syntactic
        checks and the normalized form, for many paths at once (a symlink escaping the
        root is refused when the path is read: every read validates it)."""
        return self._normalized(path)

    @staticmethod
    def _normalized(path: str) -> str:
        """The syntactic checks of :meth:`validate_relative_path` (no file system access)."""
        return normalized_path(path)

    def exists(self, path: str) -> bool:
        """Whether an object (a file, not a directory) exists at ``path``."""
        try:
            self.head(path)
        except FileNotFoundError:
            return False
        return True

    def head(self, path: str) -> ObjectMeta:
        """Size and e-tag of an object; ``FileNotFoundError`` if there is none."""
        rel = self.validate_relative_path(path)
        if (held := self.held(rel)) is not None:
            return ObjectMeta(size=held.size, e_tag=held.e_tag)
        ahead = self._ahead(rel)
        probed = ahead.meta(rel) if ahead is not None else None
        if probed is not None:  # probed moments ago, and its bytes are read at that version
            return ObjectMeta(size=probed[0], e_tag=probed[1])
        try:
            meta = obstore.head(self._store, rel)
        except (NotFoundError, FileNotFoundError, IsADirectoryError) as exc:
            raise FileNotFoundError(f"no object at {rel!r} under {self._uri}") from exc
        except GenericError as exc:
            raise self._unavailable(rel, exc) from exc
        return ObjectMeta(size=int(meta["size"]), e_tag=meta.get("e_tag"))

    def version_token(self, path: str) -> tuple[int, str | None]:
        """Size and a token that changes when the object is rewritten: a local file's
        inode and modification time (one ``stat``), an object's e-tag (one ``head``)."""
        if self._local_root is not None:
            rel = self._normalized(path)  # only a stat: reads check symlinks themselves
            try:
                st = os.stat(self._local_root / rel)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise FileNotFoundError(f"no object at {rel!r} under {self._uri}") from exc
            return int(st.st_size), f"{st.st_ino:x}-{st.st_mtime_ns:x}"
        meta = self.head(path)
        return meta.size, meta.e_tag

    def get(self, path: str) -> bytes:
        """The whole object; ``FileNotFoundError`` if there is none."""
        rel = self.validate_relative_path(path)
        if self._local_root is not None:
            return read_local(self._local_root / rel, rel=rel, root_uri=self._uri)
        if (held := self.held(rel)) is not None and held.whole:
            return held.tail
        ahead = self._ahead(rel)
        probed = ahead.meta(rel) if ahead is not None else None
        if ahead is not None and probed is not None:
            data = ahead.read(rel, 0, probed[0])
            if data is not None:
                return data
        try:
            return bytes(obstore.get(self._store, rel).bytes())
        except (NotFoundError, FileNotFoundError, IsADirectoryError) as exc:
            raise FileNotFoundError(f"no object at {rel!r} under {self._uri}") from exc
        except GenericError as exc:
            raise self._unavailable(rel, exc) from exc

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object."""
        rel = self.validate_relative_path(path)
        if end <= start:
            return b""
        if self._local_root is not None:
            return read_local(self._local_root / rel, rel=rel, root_uri=self._uri,
                              start=start, end=end)
        held = self.held(rel)
        if held is not None and (kept := held.range(start, end)) is not None:
            return kept
        ahead = self._ahead(rel)
        data = ahead.read(rel, start, end) if ahead is not None else None
        if data is not None:
            return data
        try:
            return bytes(obstore.get_range(self._store, rel, start=start, end=end))
        except (NotFoundError, FileNotFoundError, IsADirectoryError) as exc:
            raise FileNotFoundError(f"no object at {rel!r} under {self._uri}") from exc
        except GenericError as exc:
            raise self._unavailable(rel, exc) from exc

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Bytes of each range ``[start, end)`` of one object, in the order asked: on an
        object store all at once (coalesced within ``StorageOptions.coalesce_bytes``,
        :func:`windpipe.services.storage.concurrent.read_ranges`), so N ranges cost about one
        round trip, not N. A missing object is ``FileNotFoundError``, a store that does
        not answer ``unavailable``, as for :meth:`get_range`."""
        rel = self.validate_relative_path(path)
        if self._local_root is not None:
            return [self.get_range(rel, a, b) for a, b in ranges]
        opts = self._options
        return read_ranges(
            self._store, rel, ranges, errors=lambda exc: self._failed(rel, exc),
            gap=opts.coalesce_bytes, timeout_s=self._deadline_s())

    @contextmanager
    def read_ahead(self, reads: Sequence[AheadRead]) -> Iterator[ReadAhead | None]:
        """Fetch ``reads`` (in the order the caller will make them) ahead of the caller
        while the block runs, within ``StorageOptions.readahead_bytes``
        (:mod:`windpipe.services.storage.readahead`); this storage's reads take their bytes from
        it. Nothing on a local root (None) or with a zero budget."""
        if self._local_root is not None or not reads or self._options.readahead_bytes <= 0:
            yield None
            return
        opts = self._options
        ahead = ReadAhead(self._store, reads, max_bytes=opts.readahead_bytes,
                          gap=opts.coalesce_bytes, wait_s=self._deadline_s()).start()
        with self._aheads_lock:
            self._aheads.append(ahead)
        try:
            yield ahead
        finally:
            with self._aheads_lock:
                self._aheads.remove(ahead)
            ahead.close()

    def _ahead(self, rel: str) -> ReadAhead | None:
        """The running read-ahead that reads ``rel``, if any."""
        if not self._aheads:
            return None
        with self._aheads_lock:
            return next((a for a in self._aheads if a.knows(rel)), None)

    def _deadline_s(self) -> float:
        opts = self._options
        return deadline_s(timeout_s=opts.timeout_s, max_retries=opts.max_retries,
                          connect_timeout_s=opts.connect_timeout_s)

    def _failed(self, rel: str, exc: Exception) -> Exception:
        """The typed error of a failed read of ``rel``: no such object, else unavailable."""
        if isinstance(exc, (NotFoundError, FileNotFoundError, IsADirectoryError)):
            return FileNotFoundError(f"no object at {rel!r} under {self._uri}")
        if isinstance(exc, WindpipeError):
            return exc
        return self._unavailable(rel, exc)

    def list_prefix(self, prefix: str) -> list[tuple[str, int]]:
        """Every object under ``prefix`` (a directory-like prefix) as sorted (path, size)."""
        rel = self.validate_relative_path(prefix)
        out: list[tuple[str, int]] = []
        try:
            for chunk in obstore.list(self._store, prefix=rel):
                out.extend((str(m["path"]), int(m["size"])) for m in chunk)
        except (NotFoundError, FileNotFoundError):
            return []
        except GenericError as exc:
            raise self._unavailable(rel, exc) from exc
        return sorted(out)

    def put(self, path: str, data: bytes) -> None:
        """Write an object (parents are created)."""
        rel = self.validate_relative_path(path)
        if self._local_root is not None:
            (self._local_root / rel).parent.mkdir(parents=True, exist_ok=True)
        obstore.put(self._store, rel, data)

    def open_parquet(self, path: str, *, metadata: pq.FileMetaData | None = None,
                     tail: bytes = b"") -> pq.ParquetFile:
        """A ``ParquetFile`` reading through this storage (plain reads, never mmap: a user
        file truncated under a read must fail that read, not SIGBUS the process).

        ``metadata`` (an earlier read footer) spares the footer read; ``tail`` (the
        object's last bytes, already fetched) answers the footer reads on S3.
        The caller closes it (``with storage.open_parquet(p) as f``).
        """
        rel = self.validate_relative_path(path)
        if self._local_root is not None:
            full = self._local_root / rel
            if not full.is_file():
                raise FileNotFoundError(f"no object at {rel!r} under {self._uri}")
            return pq.ParquetFile(str(full), memory_map=False, metadata=metadata)
        size = self.head(rel).size
        ahead = self._ahead(rel)
        raw = RangedReader(self._store, rel, size, tail,
                           fetch=None if ahead is None else (
                               lambda a, b: ahead.read(rel, a, b)))
        return pq.ParquetFile(pa.PythonFile(raw, mode="r"), metadata=metadata)

    def zarr_store(self, path: str) -> zarr.storage.StoreLike:
        """A read-only zarr v3 store rooted at the group ``path``."""
        import zarr.storage  # noqa: PLC0415 - imported on first use (see above)

        rel = self.validate_relative_path(path)
        if self._local_root is not None:
            return zarr.storage.LocalStore(self._local_root / rel, read_only=True)
        prefix = f"{self._s3_prefix}/{rel}" if self._s3_prefix else rel
        sub = S3Store(self._s3_bucket, prefix=prefix, **self._s3_options)
        return zarr.storage.ObjectStore(sub, read_only=True)

    def open_zarr(self, path: str) -> zarr.Group:
        """The zarr v3 group at ``path``, opened read-only."""
        import zarr  # noqa: PLC0415 - imported on first use

        return zarr.open_group(self.zarr_store(path), mode="r", zarr_format=3)


def open_root(uri: str, options: StorageOptions | None = None) -> Storage:
    """The one way the services open a dataset root: a root outside ``options.allowed`` is
    ``forbidden`` (checked before anything is read), a bad URI ``invalid_request``."""
    if options is not None and options.allowed is not None:
        options.allowed.check(uri)
    try:
        return Storage.from_uri(uri, options)
    except ValueError as exc:
        raise InvalidRequest(
            f"root {uri!r}: {exc}", details={"root": uri}
        ) from exc


class StorageRoots:
    """Opened storage roots by URI, shared by a process's readers (one per root)."""

    def __init__(self, options: StorageOptions | None = None) -> None:
        self.options = options or StorageOptions()
        self._roots: dict[str, Storage] = {}
        self._lock = threading.Lock()

    def open(self, uri: str) -> Storage:
        """The storage of root ``uri`` (opened on first use)."""
        with self._lock:
            storage = self._roots.get(uri)
        if storage is not None:
            return storage
        storage = open_root(uri, self.options)
        with self._lock:
            return self._roots.setdefault(uri, storage)

    __call__ = open
