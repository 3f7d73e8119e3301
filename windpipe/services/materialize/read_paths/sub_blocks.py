"""The sub-block path: a ``block_shuffled`` batch gathered from its shuffle block's rows.

A ``block_shuffled`` plan larger than the cache was read on the chunk path: every batch
copied its lanes out of cached chunks, and each chunk was decoded once per epoch and
looked up per batch. On this path a shuffle block is decoded once, as one sub-block
(:mod:`windpipe.services.materialize.sub_blocks`: a contiguous row range of its protocol's
block; decoded on the block fill's threads, into the tier when there is one), and each of
its batches is one fancy-index gather of whole windows from it
(:func:`~services.materialize.blocks.gather_lanes`, the block path's). While a block is
served, :meth:`SubBlockPath.read_ahead` decodes the next one on a worker thread (a
read-ahead of one block), so a pass waits on decoding only where decoding is slower than
serving.

The sub-block goes through the chunk cache like any block (single flight, budget,
pins only while a batch is gathered). Without a tier it is charged its bytes, so the
read-ahead runs only when two fit the budget (``shuffle_block_bytes`` at most half the
cache, as docs/flight.md asks), and it is decoded into one of two staging buffers the
path keeps (:class:`_Staging`): the one of a sub-block the cache let go is reused, not
the page faults of a new one a block. With a tier it is charged its mapping. A
sub-block larger than the cache is not taken (the chunk path reads such a batch).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Hashable

import numpy as np

from windpipe.services.contract.errors import InternalError
from windpipe.services.materialize.blocks import (
    BlockLayout,
    block_key,
    block_request,
    gather_lanes,
)
from windpipe.services.materialize.cache import ChunkCache, ChunkRequest
from windpipe.services.materialize.lanes import LanePlan
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.materialize.read_paths.base import BufferPool, LaneArrays
from windpipe.services.materialize.sub_blocks import SubBlocks, sub_blocks
from windpipe.services.materialize.tier import Tier
from windpipe.services.planning.schedule import Schedule
from windpipe.services.storage.store import Storage

__all__ = ["SubBlockPath"]


class SubBlockPath:
    """Reads the batches of a ``block_shuffled`` pass from sub-blocks (module docstring);
    :meth:`requests` is None for a batch it does not read."""

    def __init__(self, plan: PlanContext, tables: PlanTables, cache: ChunkCache,
                 pool: BufferPool, *, storage: Storage | None, tier: Tier | None) -> None:
        self.plan = plan
        self.cache = cache
        self._tables = tables
        self._pool = pool
        self._storage = storage
        self._tier = tier
        self._subs: SubBlocks | None = (
            sub_blocks(plan) if storage is not None or tier is not None else None)
        self._requests: dict[int, tuple[ChunkRequest, BlockLayout]] = {}
        self._layouts: dict[Hashable, BlockLayout] = {}  # by cache key
        self._ahead: threading.Thread | None = None
        self._staging = _Staging()
        self._schedule: Schedule | None = None
        self.enabled = self._subs is not None

    def bind(self, schedule: Schedule) -> None:
        """Read the batches of ``schedule`` (the stream's epoch): :meth:`requests` looks up
        a batch's shuffle block there."""
        self._schedule = schedule

    def disable(self) -> None:
        """Read nothing more (after a sub-block could not be loaded: chunks read on)."""
        self.enabled = False

    def block_of(self, schedule: Schedule, g: int) -> int | None:
        """The shuffle block global batch ``g`` reads, or None when this path is off."""
        if not self.enabled or schedule.batch_block is None:
            return None
        return int(schedule.batch_block[g])

    def requests(self, lp: LanePlan) -> list[ChunkRequest] | None:
        """The sub-block load of ``lp`` (a batch of the bound schedule); None when this
        path does not read it."""
        if self._schedule is None:
            return None
        block = self.block_of(self._schedule, lp.global_batch)
        found = self._request(block) if block is not None else None
        return None if found is None else [found[0]]

    def read(self, lp: LanePlan, requests: list[ChunkRequest]) -> LaneArrays:
        """``lp``'s lanes gathered from its pinned sub-block (one copy of full lanes)."""
        (req,) = requests
        layout = self._layouts[req.key]
        spec = self.plan.specs[lp.protocol]
        c_in, c = len(spec.input_columns), len(spec.input_columns) + len(spec.target_columns)
        self._check(lp, layout)
        with self.cache.acquire(requests) as pins:
            windows, mask = gather_lanes(
                {layout.protocol: (pins[block_key(layout)], layout)},
                lane_stream=lp.lane_stream, lane_offset=lp.lane_offset,
                lane_protocol=lp.lane_protocol, n_rows=self._tables.n_rows,
                seq_len=lp.seq_len, c_in=c_in,
                take=lambda: self._pool.take(lp.n_lanes, lp.seq_len, c),
                input_fill=spec.input_fill)
        return LaneArrays(windows, mask, {})

    def read_ahead(self, schedule: Schedule, g: int) -> bool:
        """Start decoding the sub-block of global batch ``g`` on a worker thread (one at a
        time; best effort: a load that fails is left for the batch's own to report);
        True when this path reads ``g``."""
        block = self.block_of(schedule, g)
        found = self._request(block) if block is not None else None
        if found is None:
            return False
        req, layout = found
        room = self._tier is not None or 2 * layout.nbytes <= self.cache.budget_bytes
        busy = self._ahead is not None and self._ahead.is_alive()
        if room and not busy and not self.cache.contains(req.key):
            self._ahead = threading.Thread(target=_load, args=(self.cache, req), daemon=True,
                                           name="windpipe-block-ahead")
            self._ahead.start()
        return True

    def _request(self, block: int) -> tuple[ChunkRequest, BlockLayout] | None:
        found = self._requests.get(block)
        if found is None:
            assert self._subs is not None
            layout = self._subs.layout(block)
            req = block_request(self.plan, layout, storage=self._storage, tier=self._tier,
                                memory=self._staging.take)
            if req.nbytes > self.cache.budget_bytes:
                self.disable()  # a shuffle block beyond the cache: chunks
                return None
            if len(self._requests) > 2:  # the layouts of blocks served already: not kept
                self._requests.clear()
                self._layouts.clear()
            self._layouts[req.key] = layout
            found = self._requests[block] = (req, layout)
        return found

    def _check(self, lp: LanePlan, layout: BlockLayout) -> None:
        """Every lane's rows inside the sub-block (the shuffle block's reach): else the
        plan's blocks are not the schedule's, a bug, not a batch to send wrong."""
        real = lp.lane_offset >= 0
        if not real.any():
            return
        stream, offset = lp.lane_stream[real], lp.lane_offset[real]
        start = layout.row0[stream] + offset
        end = start + np.minimum(self._tables.n_rows[stream] - offset, lp.seq_len + 1)
        ok = (lp.lane_protocol[real] == layout.protocol).all()
        if not (ok and int(start.min()) >= 0 and int(end.max()) <= layout.rows):
            raise InternalError(
                f"batch {lp.global_batch} of plan {self.plan.plan_id} reads rows outside its "
                "shuffle block", details={"plan_id": self.plan.plan_id,
                                          "batch": lp.global_batch})


class _Staging:
    """At most :data:`_STAGING` float32 buffers sub-blocks are decoded into, one reused
    once nothing but this holds it (the cache evicted its sub-block: a sub-block's
    batches are copies, no view of it leaves the path), as ``BufferPool`` reuses a
    stream's outgoing arrays."""

    def __init__(self) -> None:
        self._buffers: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, rows: int, columns: int) -> np.ndarray:
        """An uninitialized ``(rows, columns)`` float32 matrix."""
        n = rows * columns
        with self._lock:
            for i in range(len(self._buffers)):
                # referenced only by the list (and getrefcount's argument): no view of it
                # is left (a view's base is the buffer, however it was derived)
                if sys.getrefcount(self._buffers[i]) == 2:
                    if self._buffers[i].shape[0] >= n:
                        return self._buffers[i][:n].reshape(rows, columns)
                    del self._buffers[i]  # too small: make room for a larger one
                    break
            buf = np.empty(n, dtype=np.float32)
            if len(self._buffers) < _STAGING:
                self._buffers.append(buf)
            return buf[:n].reshape(rows, columns)


_STAGING = 2  # the sub-block served and the one decoded ahead


def _load(cache: ChunkCache, req: ChunkRequest) -> None:
    """Load ``req`` into ``cache`` and let it go (the batches that read it pin it)."""
    with contextlib.suppress(Exception), cache.acquire([req]):
        pass  # read-ahead: a failed load is left for the batch's own to report
