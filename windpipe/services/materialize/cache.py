"""The shared, byte-budgeted chunk cache of a Flight server (design in ``docs/flight.md``).

One :class:`ChunkCache` per server holds decoded, scaled segment chunks for every
concurrent stream under one byte budget. Rules a caller can rely on:

* single flight: a chunk is loaded once even when many streams ask at once; the
  others wait for that load;
* pins: :meth:`ChunkCache.acquire` pins a batch's whole working set atomically (all
  or nothing, so two streams can never deadlock holding half of theirs) and the
  returned :class:`PinSet` unpins on exit; pinned chunks are never evicted;
* budget: loaded plus loading bytes never exceed ``budget_bytes``; unpinned chunks
  leave in LRU order to make room; a working set larger than the budget fails at
  once with ``resource_exhausted``, and a working set that does not fit because
  other streams pin the rest waits at most ``wait_timeout_s``;
* read-ahead: :meth:`ChunkCache.prefetch` loads chunks in a bounded background pool,
  only within the budget and a read-ahead byte limit, best effort (errors are left
  for the foreground load to report).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from windpipe.services.contract.errors import ResourceExhausted, WindpipeError

__all__ = ["CacheStats", "ChunkCache", "ChunkRequest", "PinSet", "working_set_error"]

V = TypeVar("V")

Loader = Callable[[], tuple[Any, int]]


def working_set_error(need: int, budget: int, **details: int) -> WindpipeError:
    """``resource_exhausted``: a batch pins ``need`` bytes (the plan report's
    ``cache_working_set_bytes`` figure, :mod:`windpipe.services.planning.working_set`), more than
    the cache budget; ``details`` say which batch."""
    return ResourceExhausted(
        f"one batch needs {need} bytes of chunks but the cache budget is {budget} bytes: "
        f"raise --cache-bytes to at least {need}",
        details={"working_set_bytes": need, "budget_bytes": budget, **details},
    )


@dataclass(frozen=True, slots=True)
class ChunkRequest:
    """One chunk a caller needs: its key, its exact size and how to load it.

    ``load`` returns ``(value, bytes_read_from_storage)``; ``nbytes`` must be the
    size of the value (it is reserved before loading so the budget holds).
    """

    key: Hashable
    nbytes: int
    load: Loader


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of a cache (JSON-ready via :meth:`as_dict`)."""

    budget_bytes: int
    resident_bytes: int
    reserved_bytes: int
    pinned_bytes: int
    peak_bytes: int
    entries: int
    hits: int
    misses: int
    evictions: int
    loads_in_flight: int
    prefetches: int
    bytes_read: int

    def as_dict(self) -> dict[str, int]:
        """Plain dict of all counters."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(eq=False)
class _Entry:
    key: Hashable
    nbytes: int
    pins: int = 0
    value: Any = None
    ready: bool = False
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class PinSet(Generic[V]):
    """Pinned chunks of one working set; use as a context manager, or call :meth:`release`."""

    def __init__(self, cache: ChunkCache, entries: dict[Hashable, _Entry]) -> None:
        self._cache = cache
        self._entries = entries
        self._released = False

    def __getitem__(self, key: Hashable) -> V:
        value: V = self._entries[key].value
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._entries)

    def release(self) -> None:
        """Unpin every chunk (idempotent)."""
        if not self._released:
            self._released = True
            self._cache._unpin(self._entries.values())

    def __enter__(self) -> PinSet[V]:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


class ChunkCache:
    """A byte-budgeted LRU cache of chunk values with pins and single-flight loads."""

    def __init__(
        self,
        budget_bytes: int,
        *,
        readahead_workers: int = 1,
        readahead_bytes: int | None = None,
        wait_timeout_s: float = 30.0,
    ) -> None:
        if budget_bytes < 1:
            msg = f"cache budget must be positive, got {budget_bytes}"
            raise ValueError(msg)
        self.budget_bytes = int(budget_bytes)
        self.wait_timeout_s = wait_timeout_s
        self._readahead_limit = (
            self.budget_bytes // 4 if readahead_bytes is None else int(readahead_bytes)
        )
        self._cond = threading.Condition()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._used = 0  # ready + loading bytes
        self._resident = 0  # ready bytes
        self._pinned = 0
        self._peak = 0
        self._hits = self._misses = self._evictions = self._prefetches = 0
        self._in_flight = 0
        self._bytes_read = 0
        self._readahead_inflight = 0
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, readahead_workers), thread_name_prefix="windpipe-readahead"
        ) if readahead_workers > 0 else None
        self._closed = False

    # -- public -------------------------------------------------------------------------

    def acquire(self, requests: Sequence[ChunkRequest]) -> PinSet[Any]:
        """Pin (loading if needed) every requested chunk, all or nothing.

        Raises ``resource_exhausted`` when the working set exceeds the budget, or does
        not fit within ``wait_timeout_s`` because other streams pin the rest; a load
        error is re-raised (after unpinning everything) to every caller waiting on it.
        """
        unique: dict[Hashable, ChunkRequest] = {}
        for req in requests:
            unique.setdefault(req.key, req)
        total = sum(r.nbytes for r in unique.values())
        if total > self.budget_bytes:
            raise working_set_error(total, self.budget_bytes)
        owned: list[tuple[_Entry, ChunkRequest]] = []
        pinned: dict[Hashable, _Entry] = {}
        deadline = time.monotonic() + self.wait_timeout_s
        with self._cond:
            while True:
                need = sum(r.nbytes for k, r in unique.items() if k not in self._entries)
                if self._make_room(need, protect=unique.keys()):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ResourceExhausted(
                        f"the cache budget of {self.budget_bytes} bytes is pinned by other "
                        f"streams; this batch needs {need} more bytes: raise --cache-bytes",
                        details={"needed_bytes": need, "budget_bytes": self.budget_bytes,
                                 "pinned_bytes": self._pinned},
                    )
                self._cond.wait(timeout=min(left, 0.5))
            for key, req in unique.items():
                entry = self._entries.get(key)
                if entry is None:
                    entry = _Entry(key=key, nbytes=req.nbytes)
                    self._entries[key] = entry
                    self._used += req.nbytes
                    self._peak = max(self._peak, self._used)
                    self._misses += 1
                    self._in_flight += 1
                    owned.append((entry, req))
                else:
                    self._entries.move_to_end(key)
                    self._hits += 1
                self._pin(entry)
                pinned[key] = entry
        pins: PinSet[Any] = PinSet(self, pinned)
        try:
            for entry, req in owned:
                self._load(entry, req)
            for entry in pinned.values():
                entry.done.wait()
                if entry.error is not None:
                    raise entry.error
        except BaseException:
            pins.release()
            raise
        return pins

    def prefetch(self, requests: Sequence[ChunkRequest]) -> int:
        """Start background loads of chunks not yet cached; returns how many started.

        Best effort: a chunk is skipped when the read-ahead limit is reached or the
        budget has no unpinned room for it.
        """
        if self._pool is None or self._closed:
            return 0
        started = 0
        for req in requests:
            with self._cond:
                if req.key in self._entries:
                    continue
                if self._readahead_inflight + req.nbytes > self._readahead_limit:
                    break
                if not self._make_room(req.nbytes):
                    break
                entry = _Entry(key=req.key, nbytes=req.nbytes)
                self._entries[req.key] = entry
                self._used += req.nbytes
                self._peak = max(self._peak, self._used)
                self._in_flight += 1
                self._prefetches += 1
                self._readahead_inflight += req.nbytes
                self._pin(entry)
            try:
                self._pool.submit(self._prefetch_one, entry, req)
            except RuntimeError:  # pool shut down meanwhile
                self._fail(entry, RuntimeError("cache closed"))
                self._unpin([entry])
                with self._cond:
                    self._readahead_inflight -= req.nbytes
                break
            started += 1
        return started

    def stats(self) -> CacheStats:
        """A consistent snapshot of the counters."""
        with self._cond:
            return CacheStats(
                budget_bytes=self.budget_bytes, resident_bytes=self._resident,
                reserved_bytes=self._used - self._resident, pinned_bytes=self._pinned,
                peak_bytes=self._peak, entries=len(self._entries), hits=self._hits,
                misses=self._misses, evictions=self._evictions,
                loads_in_flight=self._in_flight, prefetches=self._prefetches,
                bytes_read=self._bytes_read,
            )

    def keys(self) -> list[Hashable]:
        """Cached keys, least recently used first (for tests and diagnostics)."""
        with self._cond:
            return [k for k, e in self._entries.items() if e.ready]

    @property
    def evictions(self) -> int:
        """Entries evicted so far (read without the lock: a reader that saw a key held
        asks :meth:`contains` again only once this has moved)."""
        return self._evictions

    def contains(self, key: Hashable) -> bool:
        """Whether ``key`` is loaded (not merely loading)."""
        with self._cond:
            entry = self._entries.get(key)
            return entry is not None and entry.ready

    def clear(self) -> int:
        """Drop every unpinned loaded chunk; returns the bytes freed."""
        with self._cond:
            before = self._resident
            for key in [k for k, e in self._entries.items() if e.ready and e.pins == 0]:
                self._evict(key)
            self._cond.notify_all()
            return before - self._resident

    def close(self) -> None:
        """Stop the read-ahead pool (waits for running loads)."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    # -- internals (called with or without the lock as noted) -------------------------

    def _make_room(self, need: int, *, protect: Any = ()) -> bool:
        """With the lock: evict unpinned LRU chunks (not in ``protect``) until ``need`` fits."""
        if self._used + need <= self.budget_bytes:
            return True
        candidates = [
            k for k, e in self._entries.items() if e.ready and e.pins == 0 and k not in protect
        ]
        for key in candidates:
            self._evict(key)
            if self._used + need <= self.budget_bytes:
                return True
        return self._used + need <= self.budget_bytes

    def _evict(self, key: Hashable) -> None:
        entry = self._entries.pop(key)
        self._used -= entry.nbytes
        self._resident -= entry.nbytes
        self._evictions += 1
        entry.value = None

    def _pin(self, entry: _Entry) -> None:
        if entry.pins == 0:
            self._pinned += entry.nbytes
        entry.pins += 1

    def _unpin(self, entries: Any) -> None:
        with self._cond:
            for entry in entries:
                entry.pins -= 1
                if entry.pins == 0:
                    self._pinned -= entry.nbytes
            self._cond.notify_all()

    def _load(self, entry: _Entry, req: ChunkRequest) -> None:
        """Without the lock: run one load and publish its value or error."""
        try:
            value, read = req.load()
        except BaseException as exc:
            self._fail(entry, exc)
            return
        with self._cond:
            self._in_flight -= 1
            self._bytes_read += int(read)
            entry.value = value
            entry.ready = True
            self._resident += entry.nbytes
            self._cond.notify_all()
        entry.done.set()

    def _fail(self, entry: _Entry, exc: BaseException) -> None:
        with self._cond:
            self._in_flight -= 1
            entry.error = exc
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
            self._used -= entry.nbytes
            self._cond.notify_all()
        entry.done.set()

    def _prefetch_one(self, entry: _Entry, req: ChunkRequest) -> None:
        try:
            self._load(entry, req)
        finally:
            self._unpin([entry])
            with self._cond:
                self._readahead_inflight -= req.nbytes
