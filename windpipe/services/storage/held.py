"""Objects fetched ahead in one request each, many at once: what a reader of many small
objects holds before it reads them.

Registration checks every segment of a collection: on an object store each check is a
chain of round trips (the object's size and version, its footer, the footer again
through the parquet reader), which one thread pays one after another, tens of
milliseconds each. One suffix request answers all of them (size, entity tag and the
object's last bytes: the footer, or the whole of a small object), and many such requests
overlap on the storage I/O loop (:mod:`windpipe.services.storage.concurrent`).
:func:`fetch_tails` issues them; :meth:`windpipe.services.storage.store.Storage.holding` gives a
view of a root that answers ``head``, ``get`` and ``get_range`` from what is held, so
the readers run unchanged and read no byte twice. What was not fetched (a failed
request, a range outside the tail) is read from the store as before, with the same
errors: a miss costs time, never correctness.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from windpipe.services.storage.concurrent import get_tail_async, submit

__all__ = ["HeldObject", "fetch_tails"]


@dataclass(frozen=True, slots=True)
class HeldObject:
    """One object as fetched: its ``size``, entity tag and last bytes (``tail``: all of
    them when the object is at most as large as asked)."""

    size: int
    e_tag: str | None
    tail: bytes

    @property
    def whole(self) -> bool:
        """Whether ``tail`` is the whole object."""
        return len(self.tail) == self.size

    def range(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when the tail holds them, else None."""
        base = self.size - len(self.tail)
        if start < base or end > self.size or end < start:
            return None
        return self.tail[start - base : end - base]


async def _tails(store: Any, paths: Sequence[str], nbytes: int,
                 timeout_s: float) -> dict[str, HeldObject]:
    async def one(path: str) -> tuple[str, HeldObject] | None:
        try:
            size, e_tag, tail = await asyncio.wait_for(
                get_tail_async(store, path, nbytes), timeout_s)
        except Exception:  # the reader's own read reports what is wrong
            return None
        return path, HeldObject(size, e_tag, bytes(tail))

    found = await asyncio.gather(*(one(p) for p in paths))
    return dict(f for f in found if f is not None)


def fetch_tails(store: Any, paths: Sequence[str], *, nbytes: int,
                timeout_s: float) -> concurrent.futures.Future[dict[str, HeldObject]]:
    """Start fetching the last ``nbytes`` bytes (the whole object when smaller) of every
    object in ``paths`` (relative to ``store``), all at once on the storage I/O loop, one
    request each; the future answers ``{path: HeldObject}``. A path whose request failed
    or took over ``timeout_s`` is missing from the answer (its reader reads it the usual
    way, which says why). The caller bounds requests and bytes in flight by the number of
    paths it passes at once."""
    return submit(_tails(store, list(paths), max(8, int(nbytes)), timeout_s))
