"""Build the batches ``start..end`` of one stream in order, with chunk read-ahead.

The Flight server's ``DoGet`` and the SDK's same-host reader iterate a
:class:`BatchPipeline`; it owns the order (blocks of lane plans and provenance
aligned on the pass, so a resumed stream sends the same bytes), the read-ahead of
upcoming chunks into the shared cache and, optionally, a builder thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from windpipe.services.materialize.batch_memory import BatchMemory
from windpipe.services.materialize.builder import BLOCK_BATCHES, BatchBuilder, BuiltBatch
from windpipe.services.materialize.cache import ChunkRequest
from windpipe.services.materialize.lanes import LanePlan
from windpipe.services.materialize.windows import WindowPass
from windpipe.services.planning.schedule import Schedule

__all__ = ["BatchPipeline"]

Item = tuple[int, BuiltBatch]
_DONE = object()
_JOIN_S = 30.0


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _batch_bytes(item: Item) -> int:
    return item[1].nbytes


class BatchPipeline:
    """Builds the batches ``start..end`` of a pass in order, with chunk read-ahead.

    Yields ``(i, built)`` (:class:`~services.materialize.builder.BuiltBatch`). After each
    batch, background loads of the chunks of the next ``readahead_batches`` batches start
    (``ChunkCache.prefetch``). In a ``block_shuffled`` pass (``Schedule.batch_block``) they
    also reach for the next shuffle block from the start of the current one: its sub-block
    is decoded on a worker thread (``BatchBuilder.read_ahead_block``; on the chunk path, the
    chunks of its first batch, nearly all of its block's, are prefetched), so a block is
    decoded while the one before it is served instead of at its first batch (two blocks fit
    the cache when ``shuffle_block_bytes`` is at most half of it; what does not fit is
    skipped and asked for again at the next batch). An in-process reader's batches of full
    windows take the window path (``BatchBuilder.window_pass``, or the pass's ``windows``
    its reader keeps) instead, written into ``memory`` when given. With
    ``build_ahead_bytes > 0`` a second thread builds batches ahead, up to that many bytes of
    built batches (at least one), so building the next batch overlaps sending this one
    (numpy and Arrow release the GIL). A build error is raised at that batch, after every
    earlier batch. A built batch holds no pins (a build releases them before returning), so
    a consumer that stops early leaves nothing pinned, and closing the iterator stops the
    builder thread.
    """

    def __init__(self, builder: BatchBuilder, schedule: Schedule, batches: np.ndarray, *,
                 start: int, end: int, readahead_batches: int = 2,
                 build_ahead_bytes: int = 0, windows: WindowPass | None = None,
                 memory: BatchMemory | None = None) -> None:
        self._builder = builder
        self._windows = windows
        self._memory = memory
        self._schedule = schedule
        self._batches = batches
        self._range = (start, end)
        self._readahead = readahead_batches
        self._ahead_bytes = build_ahead_bytes
        self._block_starts: np.ndarray | None = None  # pass indices where a block begins
        if schedule.batch_block is not None and batches.shape[0]:
            block = schedule.batch_block[batches]
            self._block_starts = np.flatnonzero(block[1:] != block[:-1]) + 1

    def __iter__(self) -> Iterator[Item]:
        return self._items() if self._ahead_bytes <= 0 else self._built_ahead()

    def _built_ahead(self) -> Iterator[Item]:
        """The items, built by a helper thread at most ``build_ahead_bytes`` ahead."""
        items: queue.Queue[Any] = queue.Queue()
        room = threading.Condition()
        queued = [0]
        stop = threading.Event()

        def run() -> None:
            try:
                for item in self._items():
                    size = _batch_bytes(item)
                    with room:
                        while (queued[0] and queued[0] + size > self._ahead_bytes
                               and not stop.is_set()):
                            room.wait(0.1)
                        if stop.is_set():
                            return
                        queued[0] += size
                    items.put((item, size))
            except BaseException as exc:
                items.put(_Failure(exc))
                return
            items.put(_DONE)

        thread = threading.Thread(target=run, name="windpipe-build-ahead", daemon=True)
        thread.start()
        try:
            while True:
                got = items.get()
                if got is _DONE:
                    return
                if isinstance(got, _Failure):
                    raise got.exc
                item, size = got
                with room:
                    queued[0] -= size
                    room.notify_all()
                yield item
        finally:
            stop.set()
            with room:
                room.notify_all()
            thread.join(_JOIN_S)

    def _items(self) -> Iterator[Item]:
        builder, schedule, batches = self._builder, self._schedule, self._batches
        start, end = self._range
        plans: dict[int, LanePlan] = {}
        windows = self._windows or builder.window_pass(schedule, batches, start=start, end=end)
        prepared = -1
        for i in range(start, end):
            fast = windows.build(i, memory=self._memory)
            if fast is not None:  # full windows of one protocol: one copy, no lane plan
                plans.pop(i, None)
                yield i, fast
                continue
            g = int(batches[i])
            k0 = i - i % BLOCK_BATCHES
            if k0 != prepared:
                # blocks aligned on the pass (not on ``start``): a batch is the same slice of
                # the same block in every stream, so a resumed pass is byte-for-byte the tail
                builder.prepare(schedule, batches[k0 : k0 + BLOCK_BATCHES])
                prepared = k0
            self._plan_ahead(i, end, plans)
            lp = plans.pop(i)
            built = builder.build_arrays(schedule, g, batch_idx=i, lp=lp)
            self._read_ahead(i, end, plans)
            yield i, built

    def _plan_ahead(self, i: int, end: int, plans: dict[int, LanePlan]) -> None:
        """Make sure ``plans`` holds batch ``i``'s lane plan (computed a block at a time)."""
        if i in plans:
            return
        stop = min(end, i + BLOCK_BATCHES)
        for j, lp in enumerate(self._builder.lane_plans(self._schedule, self._batches[i:stop])):
            plans[i + j] = lp

    def _read_ahead(self, i: int, end: int, plans: dict[int, LanePlan]) -> None:
        if self._readahead <= 0:
            return
        builder = self._builder
        requests: list[ChunkRequest] = []
        for j in range(i + 1, min(end, i + 1 + self._readahead)):
            self._plan_ahead(j, end, plans)
            requests.extend(builder.read_ahead_requests(plans[j]))
        starts = self._block_starts
        if starts is not None:  # the next shuffle block's first batch, after this block's
            k = int(np.searchsorted(starts, i, side="right"))
            if k < starts.shape[0] and int(starts[k]) < end:
                nxt = int(starts[k])
                # its sub-block decoded on a worker thread; else its chunks prefetched
                if not builder.read_ahead_block(self._schedule, int(self._batches[nxt])):
                    self._plan_ahead(nxt, end, plans)
                    requests.extend(builder.read_ahead_requests(plans[nxt]))
        if requests:
            builder.cache.prefetch(requests)
