"""``RangedReader``: a seekable read-only file over one object in an obstore store.

:meth:`windpipe.services.storage.store.Storage.open_parquet` hands it to pyarrow's parquet
reader for remote roots, so a reader fetches the byte ranges it reads, not the object.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import obstore

__all__ = ["RangedReader"]


class RangedReader(io.RawIOBase):
    """A seekable read-only file over one object, one ranged GET per read.

    ``tail`` (the last bytes of the object, already fetched) answers the footer
    reads of a parquet reader without another request; ``fetch`` (a read-ahead's
    answer for ``[start, end)``, None when it has no such bytes) answers a read before
    the store is asked.
    """

    def __init__(self, store: Any, path: str, size: int, tail: bytes = b"", *,
                 fetch: Callable[[int, int], bytes | None] | None = None) -> None:
        super().__init__()
        self._fetch = fetch
        self._store = store
        self._path = path
        self._size = size
        self._pos = 0
        self._tail = tail
        self._tail_start = size - len(tail)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        stop = self._size if size is None or size < 0 else min(self._size, start + size)
        if stop <= start:
            return b""
        if self._tail and start >= self._tail_start:
            data = self._tail[start - self._tail_start : stop - self._tail_start]
        else:
            found = self._fetch(start, stop) if self._fetch is not None else None
            data = found if found is not None else bytes(
                obstore.get_range(self._store, self._path, start=start, end=stop))
        self._pos = stop
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)
