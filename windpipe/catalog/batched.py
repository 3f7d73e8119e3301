"""Registration's reads of many small segments on a few threads, in batches.

One future per segment costs more than a small segment's footer (a lock, a waiter, a
wake-up), and on a local disk more threads than cores only fight over the interpreter
lock. So segments go to the threads in batches of :data:`BATCH` (each batch read in
order on one thread), at most ``workers`` batches at a time and ``2 * workers`` submitted
ahead: memory and open files stay bounded whatever the number of segments, and results
come back in the order given (what is computed from them stays deterministic).

:func:`workers_for` says how many threads a root's per-segment reads get (the profile's
second reads, an object store's segments other than parquet):
:data:`LOCAL_WORKERS` on a local disk (the page cache answers at once and the work is
Python's: more threads only contend for the interpreter lock), :data:`REMOTE_WORKERS`
on an object store (each read waits on the network; threads overlap the waits). A local
root's checks run in larger batches whose decoding is pyarrow's, off the lock
(:mod:`windpipe.catalog.checks`).

:func:`prefetched_map` is the object store's form for objects one request describes (a
parquet segment: its size, tag and footer, or the whole of a small one, in one suffix
request): the requests of :data:`REMOTE_BATCH` objects at a time go out together on the
storage I/O loop (:func:`windpipe.services.storage.held.fetch_tails`), at most
:data:`REMOTE_REQUESTS` in flight (and as many tails of at most :data:`TAIL_BYTES`
held), while this thread checks the objects already fetched from memory: the round
trips overlap each other and the checks, instead of three of them a segment one after
another.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import TypeVar

from windpipe.services.storage.held import HeldObject, fetch_tails
from windpipe.services.storage.store import Storage

__all__ = ["BATCH", "LOCAL_WORKERS", "REMOTE_BATCH", "REMOTE_REQUESTS", "REMOTE_WORKERS",
           "TAIL_BYTES", "batched_map", "prefetched_map", "workers_for"]

BATCH = 32
LOCAL_WORKERS = 1  # measured, 7,414 segments on 2 cores: 1 thread 1.4 s, 2: 2.1 s, 4: 2.5 s
REMOTE_WORKERS = 8
REMOTE_BATCH = 16
REMOTE_REQUESTS = 64  # measured behind 20 ms: 8 in flight 8.4 ms a segment, 16: 5.6, 64: 4.9
TAIL_BYTES = 64 << 10  # a parquet footer, or the whole of a small segment

T = TypeVar("T")
R = TypeVar("R")


def workers_for(storage: Storage) -> int:
    """Threads for one registration's segment reads on ``storage``."""
    return LOCAL_WORKERS if storage.is_local else REMOTE_WORKERS


def _run(fn: Callable[[T], R], batch: list[T]) -> list[R]:
    return [fn(item) for item in batch]


def batched_map(
    fn: Callable[[T], R], items: Iterable[T], *, workers: int, batch: int = BATCH,
    stop: Callable[[], bool] | None = None,
) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` in the order of ``items``, on at most ``workers`` threads, in
    batches of ``batch``; no new batch is submitted once ``stop()`` holds (the items not
    submitted are left out of the answer). An exception of ``fn`` propagates."""
    todo = iter(items)
    pending: deque[tuple[list[T], Future[list[R]]]] = deque()
    with ThreadPoolExecutor(max_workers=max(1, workers),
                            thread_name_prefix="windpipe-segments") as pool:
        try:
            while True:
                while len(pending) < 2 * max(1, workers) and not (stop is not None and stop()):
                    chunk = list(islice(todo, max(1, batch)))
                    if not chunk:
                        break
                    pending.append((chunk, pool.submit(_run, fn, chunk)))
                if not pending:
                    return
                chunk, fut = pending.popleft()
                yield from zip(chunk, fut.result(), strict=True)
        finally:
            for _chunk, fut in pending:
                fut.cancel()


def prefetched_map(
    fn: Callable[[Storage, str], R], storage: Storage, paths: Iterable[str], *,
    requests: int = REMOTE_REQUESTS, batch: int = REMOTE_BATCH, tail_bytes: int = TAIL_BYTES,
    stop: Callable[[], bool] | None = None,
) -> Iterator[tuple[str, R]]:
    """``(path, fn(view, path))`` in the order of ``paths`` (relative, normalized), where
    ``view`` holds the object's size, tag and last ``tail_bytes`` bytes
    (:meth:`Storage.holding`), fetched ahead in one request each, ``batch`` objects a
    request group, at most ``requests`` requests in flight; ``fn`` runs on this thread.
    A path whose request failed is handed over unheld (``fn`` reads it as usual). No new
    group is started once ``stop()`` holds (the paths not started are left out)."""
    todo = iter(paths)
    batch = max(1, min(batch, requests))
    ahead = max(1, requests // batch)
    pending: deque[tuple[list[str], Future[dict[str, HeldObject]]]] = deque()
    try:
        while True:
            while len(pending) < ahead and not (stop is not None and stop()):
                chunk = list(islice(todo, batch))
                if not chunk:
                    break
                pending.append((chunk, fetch_tails(storage.store, chunk, nbytes=tail_bytes,
                                                   timeout_s=storage.deadline_s)))
            if not pending:
                return
            chunk, fut = pending.popleft()
            view = storage.holding(fut.result())
            for path in chunk:
                yield path, fn(view, path)
    finally:
        for _chunk, fut in pending:
            fut.cancel()
