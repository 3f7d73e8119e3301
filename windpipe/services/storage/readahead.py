"""``ReadAhead``: the reads a consumer is about to make, fetched before it asks.

A chunk load from object storage is a chain of round trips (the object's size and
version, its footer, the column chunks), each worth tens of milliseconds, which one
thread issuing them in turn waits through one by one. A consumer that knows the
order of its reads (a block fill decodes every chunk of a plan in turn) hands them
over as :class:`AheadRead` s; the read-ahead then, on the background loop of
:mod:`windpipe.services.storage.concurrent`:

* probes each object once with one suffix request (size, entity tag and its last
  bytes: a parquet footer, or the whole of a small object), a few reads ahead;
* asks the read for its byte ranges (a parquet row group's column chunks, from the
  footer), coalesces them (:mod:`windpipe.services.storage.coalesce`) and fetches the spans
  concurrently, pinned to the probed version (``If-Match``: an object rewritten in
  between fails the span, and the consumer's own read then reports the change);
* keeps at most the window of :mod:`windpipe.services.storage.pacing` (bandwidth x latency,
  measured as it goes) fetched-or-in-flight and not yet consumed, never more than
  ``max_bytes`` unless one read alone is larger.

The consumer reads as before; :class:`~services.storage.store.Storage` answers its
``head``, ``get``, ``get_range`` and parquet reads from here when it can (:meth:`meta`,
:meth:`read`) and from the store when not, so a failed or missed prefetch costs time,
never correctness, and errors stay the ones the direct read raises. A read's bytes
are released once every range it named was read, or when the consumer moves on to a
later read (reads are consumed in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from windpipe.services.storage.coalesce import coalesce, split
from windpipe.services.storage.concurrent import get_range_async, get_tail_async, submit
from windpipe.services.storage.pacing import Pacing, PacingFigures

__all__ = ["AheadRead", "AheadStats", "RangesOf", "ReadAhead"]

# (size, entity tag, the object's last bytes) -> the ranges a read takes (None: unknown)
RangesOf = Callable[[int, str | None, memoryview], Sequence[tuple[int, int]] | None]
TAIL_BYTES = 64 << 10
_PROBES_AHEAD = 32  # objects probed ahead of the read being fetched


@dataclass(frozen=True, slots=True)
class AheadRead:
    """One read of the consumer, in its order: object ``path``, and ``ranges`` says which
    byte ranges it takes once the object's size, tag and last ``tail_bytes`` are known."""

    path: str
    ranges: RangesOf
    tail_bytes: int = TAIL_BYTES


@dataclass(frozen=True, slots=True)
class AheadStats:
    """What a read-ahead did: requests, bytes fetched, reads served from it or missed,
    the most bytes it held at once, its bound, and the measured pacing."""

    reads: int
    requests: int
    bytes_fetched: int
    hits: int
    misses: int
    peak_held_bytes: int
    max_bytes: int
    pacing: PacingFigures


@dataclass
class _Probe:
    event: threading.Event = field(default_factory=threading.Event)
    size: int = 0
    e_tag: str | None = None
    tail: memoryview = field(default_factory=lambda: memoryview(b""))
    failed: bool = False


@dataclass
class _Part:
    start: int
    end: int
    data: memoryview | None = None
    arrived: bool = False


@dataclass
class _Slot:
    index: int
    read: AheadRead
    state: str = "pending"  # pending -> active -> done | failed; any -> released
    parts: list[_Part] = field(default_factory=list)
    members: set[tuple[int, int]] = field(default_factory=set)
    waiting: int = 0
    touched: bool = False
    event: threading.Event = field(default_factory=threading.Event)


class ReadAhead:
    """Fetches ``reads`` ahead of a consumer (see the module docstring); start it with
    :meth:`start`, end it with :meth:`close` (in-flight requests are cancelled)."""

    def __init__(self, store: Any, reads: Sequence[AheadRead], *, max_bytes: int,
                 gap: int, max_span: int = 8 << 20, max_requests: int = 32,
                 wait_s: float = 120.0, floor_bytes: int = 16 << 20) -> None:
        self._store = store
        self._slots = [_Slot(i, r) for i, r in enumerate(reads)]
        self._by_path: dict[str, list[_Slot]] = {}
        for slot in self._slots:
            self._by_path.setdefault(slot.read.path, []).append(slot)
        self._probes: dict[str, _Probe] = {}
        self.max_bytes = max(1, int(max_bytes))
        self.pacing = Pacing(max_bytes=self.max_bytes, floor_bytes=floor_bytes)
        self._gap, self._max_span, self._max_requests = gap, max_span, max_requests
        self._wait_s = wait_s
        self._lag = 0  # reads that may be taken out of order (:meth:`allow_consumers`)
        self._lock = threading.Lock()
        self._held = self._peak = self._requests = self._fetched = 0
        self._hits = self._misses = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._room: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._driver: Any = None

    # -- the consumer's side (any thread) ------------------------------------------------

    def start(self) -> ReadAhead:
        """Begin fetching (on the storage I/O loop)."""
        self._driver = submit(self._drive())
        return self

    def close(self) -> None:
        """Stop: cancel what is in flight and drop every held byte."""
        with self._lock:
            self._closed = True
            for slot in self._slots:
                self._release(slot)
        if self._driver is not None:
            self._driver.cancel()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._cancel_all)

    def allow_consumers(self, lag: int) -> None:
        """Let consumers on several threads take the reads out of order by up to ``lag``
        reads: a read is dropped untaken only once the consumers are more than ``lag``
        reads past it (not at the first later read), so a thread that started on read
        ``k`` just after another started on ``k + 1`` still finds its bytes here."""
        self._lag = max(0, int(lag))

    def knows(self, path: str) -> bool:
        """Whether ``path`` is one of the objects this read-ahead reads."""
        return path in self._by_path

    def meta(self, path: str) -> tuple[int, str | None] | None:
        """Size and entity tag of ``path`` as probed (waiting for a probe in flight); None
        when it was not probed or the probe failed."""
        probe = self._probes.get(path)
        if probe is None or not probe.event.wait(self._wait_s) or probe.failed:
            return None
        return probe.size, probe.e_tag

    def read(self, path: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of ``path`` if fetched or being fetched (waits for
        them), else None (the caller reads from the store)."""
        if path not in self._by_path or self._closed:
            return None
        probe = self._probes.get(path)
        if probe is not None and probe.event.is_set() and not probe.failed \
                and start >= probe.size - len(probe.tail) and end <= probe.size:
            base = probe.size - len(probe.tail)
            return self._hit(bytes(probe.tail[start - base : end - base]))
        with self._lock:
            slot = next((s for s in self._by_path[path] if s.state in ("active", "done")
                         and self._covers(s, start, end)), None)
            if slot is None:
                self._misses += 1
                return None
            slot.touched = True
        if not slot.event.wait(self._wait_s):
            self._miss()
            return None
        with self._lock:
            if slot.state != "done":
                self._misses += 1
                return None
            data = self._slice(slot, start, end)
            if data is None:
                self._misses += 1
                return None
            slot.members = {m for m in slot.members if not (start <= m[0] and m[1] <= end)}
            if not slot.members:
                self._release(slot)
            # the consumers have moved past them (by more than the lag they are allowed)
            for earlier in self._slots[: max(0, slot.index - self._lag)]:
                if not earlier.touched:
                    self._release(earlier)
            self._hits += 1
        return data

    def stats(self) -> AheadStats:
        """What this read-ahead did so far."""
        with self._lock:
            return AheadStats(len(self._slots), self._requests, self._fetched, self._hits,
                              self._misses, self._peak, self.max_bytes, self.pacing.figures())

    def _hit(self, data: bytes) -> bytes:
        with self._lock:
            self._hits += 1
        return data

    def _miss(self) -> None:
        with self._lock:
            self._misses += 1

    @staticmethod
    def _covers(slot: _Slot, start: int, end: int) -> bool:
        pos = start
        for part in slot.parts:
            if part.start <= pos < part.end:
                pos = part.end
            if pos >= end:
                return True
        return False

    @staticmethod
    def _slice(slot: _Slot, start: int, end: int) -> bytes | None:
        pieces: list[bytes] = []
        pos = start
        for part in slot.parts:
            if part.start <= pos < part.end and part.data is not None:
                stop = min(end, part.start + len(part.data))
                pieces.append(bytes(part.data[pos - part.start : stop - part.start]))
                pos = stop
            if pos >= end:
                return b"".join(pieces)
        return None

    def _release(self, slot: _Slot) -> None:
        """Drop a slot's bytes (lock held); parts still in flight are counted until they
        arrive."""
        if slot.state == "released":
            return
        for part in slot.parts:
            if part.arrived and part.data is not None:
                self._held -= part.end - part.start
                part.data = None
        slot.state = "released"
        slot.event.set()
        self._wake()

    def _wake(self) -> None:
        loop, room = self._loop, self._room
        if loop is not None and room is not None and not loop.is_closed():
            loop.call_soon_threadsafe(room.set)

    # -- the loop's side -----------------------------------------------------------------

    def _cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _drive(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._room = asyncio.Event()
        gate = asyncio.Semaphore(self._max_requests)
        probes: dict[str, asyncio.Task[Any]] = {}
        ahead = 0
        for slot in self._slots:
            while ahead < len(self._slots) and ahead < slot.index + _PROBES_AHEAD:
                path = self._slots[ahead].read.path
                if path not in probes:
                    self._probes[path] = _Probe()
                    probes[path] = self._spawn(
                        self._probe(path, self._slots[ahead].read.tail_bytes, gate))
                ahead += 1
            if self._closed:
                return
            await asyncio.wait([probes[slot.read.path]])
            await self._issue(slot, self._probes[slot.read.path], gate)

    async def _probe(self, path: str, nbytes: int, gate: asyncio.Semaphore) -> None:
        probe = self._probes[path]
        try:
            async with gate:
                token = self.pacing.start()
                probe.size, probe.e_tag, probe.tail = await get_tail_async(
                    self._store, path, nbytes)
                self.pacing.done(token, len(probe.tail))
                with self._lock:
                    self._requests += 1
                    self._fetched += len(probe.tail)
        except Exception:  # the consumer's own read reports it
            probe.failed = True
        finally:
            probe.event.set()

    async def _issue(self, slot: _Slot, probe: _Probe, gate: asyncio.Semaphore) -> None:
        ranges: Sequence[tuple[int, int]] | None = None
        if not probe.failed:
            try:
                ranges = slot.read.ranges(probe.size, probe.e_tag, probe.tail)
            except Exception:
                ranges = None
        tail_start = probe.size - len(probe.tail)
        if ranges is not None:  # what the probe holds needs no request
            ranges = [(a, b) for a, b in ranges if b > a and not (a >= tail_start)]
        spans = coalesce(ranges or (), gap=self._gap)
        need = sum(s.nbytes for s in spans)
        while True:
            with self._lock:
                if self._closed or slot.state != "pending" or ranges is None:
                    if slot.state == "pending":
                        slot.state = "failed" if ranges is None else "released"
                        slot.event.set()
                    return
                window = self.pacing.figures().window_bytes
                if self._held == 0 or self._held + need <= window:
                    slot.state = "active"
                    slot.members = set(ranges)
                    slot.parts = [_Part(a, b) for s in spans
                                  for a, b in split(s, max_span=self._max_span)]
                    slot.waiting = len(slot.parts)
                    self._held += need
                    self._peak = max(self._peak, self._held)
                    break
            assert self._room is not None
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), timeout=0.25)
        if not slot.parts:
            with self._lock:
                slot.state = "done"
                slot.event.set()
            return
        for part in slot.parts:
            self._spawn(self._fetch(slot, part, probe.e_tag, gate))

    async def _fetch(self, slot: _Slot, part: _Part, e_tag: str | None,
                     gate: asyncio.Semaphore) -> None:
        data: memoryview | None = None
        try:
            async with gate:
                token = self.pacing.start()
                data = await get_range_async(self._store, slot.read.path, part.start,
                                             part.end, e_tag=e_tag)
                self.pacing.done(token, len(data))
        except asyncio.CancelledError:
            data = None
            raise
        except Exception:
            data = None
        finally:
            with self._lock:
                part.arrived = True
                if slot.state == "released" or data is None:
                    self._held -= part.end - part.start
                    self._wake()
                else:
                    part.data = data
                    self._requests += 1
                    self._fetched += len(data)
                if data is None and slot.state == "active":
                    slot.state = "failed"
                slot.waiting -= 1
                if slot.waiting == 0 and slot.state in ("active", "failed"):
                    if slot.state == "active":
                        slot.state = "done"
                    else:
                        self._release_failed(slot)
                    slot.event.set()

    def _release_failed(self, slot: _Slot) -> None:
        """A slot with a failed part: its arrived bytes go (lock held)."""
        for part in slot.parts:
            if part.data is not None:
                self._held -= part.end - part.start
                part.data = None
        self._wake()
