"""Concurrent object-store reads through obstore's async API on one background event loop.

A remote read costs a round trip before its first byte, so reads issued one after the
other spend most of their time waiting. obstore's async calls run many requests on
its own I/O runtime; this module gives them one event loop per process (a daemon
thread, started on first use and again in a forked child) so synchronous callers
(the parquet reader, chunk loads in threads) can issue many at once and wait for
exactly the ones they need.

:func:`read_ranges` is the plain form: byte ranges of one object, coalesced
(:mod:`windpipe.services.storage.coalesce`), fetched side by side, each answered exactly.
Failures are the storage's typed errors (``FileNotFoundError`` for a missing object,
``unavailable`` for a store that does not answer); obstore's own retries and
timeouts (``StorageOptions``) apply to every request, and the caller never waits
longer than :func:`deadline_s` of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import obstore

from windpipe.services.storage.coalesce import coalesce, split

__all__ = [
    "ErrorMap", "deadline_s", "get_range_async", "get_tail_async", "read_ranges", "run",
    "submit",
]

T = TypeVar("T")
ErrorMap = Callable[[Exception], Exception]  # an obstore failure -> the storage's typed error

_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
_loop_lock = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The process's background loop (a new one in a forked child: threads do not fork)."""
    global _loop, _loop_pid
    with _loop_lock:
        if _loop is None or _loop_pid != os.getpid() or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="windpipe-storage-io",
                                      daemon=True)
            thread.start()
            _loop, _loop_pid = loop, os.getpid()
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the background loop; its future (thread-safe, cancellable)."""
    return asyncio.run_coroutine_threadsafe(coro, _event_loop())


def run(coro: Coroutine[Any, Any, T], *, timeout_s: float) -> T:
    """Run ``coro`` on the background loop and wait for it, at most ``timeout_s``
    (then it is cancelled and ``TimeoutError`` raised: nothing waits forever)."""
    future = submit(coro)
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"object-store reads did not finish in {timeout_s:g} s") from None


def deadline_s(*, timeout_s: float, max_retries: int, connect_timeout_s: float) -> float:
    """The longest one request may take with obstore's retries (each try bounded by the
    request timeout, the retries by it too) plus slack: past it the caller stops waiting."""
    return connect_timeout_s + timeout_s * (2 + max_retries) + 5.0


async def get_range_async(store: Any, path: str, start: int, end: int, *,
                          e_tag: str | None = None) -> memoryview:
    """Bytes ``[start, end)``; with ``e_tag`` only of that version of the object
    (another version fails with obstore's ``PreconditionError``)."""
    if e_tag is None:
        data = await obstore.get_range_async(store, path, start=start, end=end)
    else:
        result = await obstore.get_async(
            store, path, options={"range": (start, end), "if_match": e_tag})
        data = await result.bytes_async()
    return memoryview(data)


async def get_tail_async(store: Any, path: str,
                         nbytes: int) -> tuple[int, str | None, memoryview]:
    """Size, entity tag and the last ``nbytes`` bytes (the whole object when smaller) of
    an object, in one request."""
    result = await obstore.get_async(store, path, options={"range": {"suffix": nbytes}})
    meta = result.meta
    data = await result.bytes_async()
    return int(meta["size"]), meta.get("e_tag"), memoryview(data)


async def _read_ranges(store: Any, path: str, ranges: Sequence[tuple[int, int]], *,
                       gap: int, max_span: int, max_requests: int) -> list[bytes]:
    gate = asyncio.Semaphore(max(1, max_requests))

    async def part(a: int, b: int) -> tuple[int, memoryview]:
        async with gate:
            return a, await get_range_async(store, path, a, b)

    spans = coalesce(ranges, gap=gap)
    parts = [(a, b) for span in spans for a, b in split(span, max_span=max_span)]
    fetched = dict(await asyncio.gather(*(part(a, b) for a, b in parts)))
    starts = sorted(fetched)
    out: list[bytes] = []
    for a, b in ranges:
        if b <= a:
            out.append(b"")
            continue
        pieces = []
        pos = a
        for s in starts:  # the parts covering [a, b), in order
            data = fetched[s]
            if s + len(data) <= pos or s >= b:
                continue
            pieces.append(bytes(data[pos - s : min(b, s + len(data)) - s]))
            pos = s + len(data)
            if pos >= b:
                break
        out.append(b"".join(pieces))
    return out


def read_ranges(store: Any, path: str, ranges: Sequence[tuple[int, int]], *,
                errors: ErrorMap, gap: int = 1 << 20, max_span: int = 8 << 20,
                max_requests: int = 16, timeout_s: float = 120.0) -> list[bytes]:
    """Bytes of each range ``[start, end)`` of one object, in the order asked: ranges
    within ``gap`` bytes fetched as one request, requests over ``max_span`` cut in parts,
    at most ``max_requests`` at once. ``errors`` maps a failure to the storage's typed
    error; one failed range fails the call."""
    coro = _read_ranges(store, path, ranges, gap=gap, max_span=max_span,
                        max_requests=max_requests)
    try:
        return run(coro, timeout_s=timeout_s)
    except Exception as exc:
        raise errors(exc) from exc
