"""Build the batches ``start..end`` of one stream in order, with chunk read-ahead.

The Flight server's ``DoGet`` iterates a :class:`BatchPipeline`; it owns the order
(blocks of lane plans and provenance aligned on the pass, so a resumed stream sends
the same bytes) and the read-ahead of upcoming chunks into the shared cache.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from contract.wire import BatchMetadata
from materialize.builder import BLOCK_BATCHES, BatchBuilder
from materialize.cache import ChunkRequest
from materialize.lanes import LanePlan
from planning.schedule import Schedule

__all__ = ["BatchPipeline"]


class BatchPipeline:
    """Builds the batches ``start..end`` of a pass in order, with chunk read-ahead.

    Yields ``(i, record_batch, metadata)``. After each batch,
    background loads of the chunks of the next ``readahead_batches`` batches start
    (``ChunkCache.prefetch``). A build error is raised at that batch, after every
    earlier batch. A built batch holds no pins (a build releases them before
    returning), so a consumer that stops early leaves nothing pinned.
    """

    def __init__(self, builder: BatchBuilder, schedule: Schedule, batches: np.ndarray, *,
                 start: int, end: int, readahead_batches: int = 2) -> None:
        self._builder = builder
        self._schedule = schedule
        self._batches = batches
        self._range = (start, end)
        self._readahead = readahead_batches

    def __iter__(self) -> Iterator[tuple[int, pa.RecordBatch, BatchMetadata]]:
        return self._items()

    def _items(self) -> Iterator[tuple[int, pa.RecordBatch, BatchMetadata]]:
        builder, schedule, batches = self._builder, self._schedule, self._batches
        start, end = self._range
        plans: dict[int, LanePlan] = {}
        for i in range(start, end):
            g = int(batches[i])
            if i == start or i % BLOCK_BATCHES == 0:
                # blocks aligned on the pass (not on ``start``): a batch is the same slice of
                # the same block in every stream, so a resumed pass is byte-for-byte the tail
                k0 = i - i % BLOCK_BATCHES
                builder.prepare(schedule, batches[k0 : k0 + BLOCK_BATCHES])
            self._plan_ahead(i, end, plans)
            lp = plans.pop(i)
            batch, meta = builder.build(schedule, g, batch_idx=i, lp=lp)
            self._read_ahead(i, end, plans)
            yield i, batch, meta

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
        if requests:
            builder.cache.prefetch(requests)
