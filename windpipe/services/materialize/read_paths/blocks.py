"""The block path: a batch gathered from the blocks of its lanes' protocols
(:mod:`windpipe.services.materialize.blocks`), one fancy-index copy of whole windows."""

from __future__ import annotations

from typing import Any

import numpy as np

from windpipe.services.contract.errors import WindpipeError
from windpipe.services.materialize.blocks import (
    BlockLayout,
    block_key,
    block_layouts,
    block_request,
)
from windpipe.services.materialize.blocks import gather_lanes as gather_block_lanes
from windpipe.services.materialize.cache import ChunkCache, ChunkRequest
from windpipe.services.materialize.lanes import LanePlan
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.materialize.read_paths.base import BufferPool, LaneArrays
from windpipe.services.materialize.tier import Block, Tier
from windpipe.services.storage.store import Storage

__all__ = ["BlockPath"]


class BlockPath:
    """Reads batches from blocks. With ``loads`` it reads every batch, loading the blocks
    it needs (from the tier, else decoded from storage); without, only a batch whose
    blocks the cache or the tier already holds (:meth:`requests` is None for the others).

    The tier counts for a path without loads so that a stream of a plan larger than the
    cache, which starts on chunks while ``windpipe.flight_server.tier_fill`` decodes its blocks
    into the tier behind it, reads from the tier from the batch after a block is done:
    the first pass is decoded once, sequentially, not per window for the rest of it."""

    def __init__(self, plan: PlanContext, tables: PlanTables, cache: ChunkCache,
                 pool: BufferPool, *, storage: Storage | None, tier: Tier | None,
                 loads: bool, memo: dict[int, ChunkRequest] | None = None) -> None:
        self.plan = plan
        self.cache = cache
        self.loads = loads
        self.layouts: tuple[BlockLayout, ...] = block_layouts(plan)
        self._tables = tables
        self._pool = pool
        self._storage = storage
        self._tier = tier
        self._chain = plan.spec.cross_protocol_state_carry == "chain"
        self._requests: dict[int, ChunkRequest] = {} if memo is None else memo
        self._in_tier: set[int] = set()  # protocol codes whose block the tier was seen to hold

    def held_only(self) -> BlockPath:
        """This path reading only blocks the cache holds (what follows a failed load)."""
        return BlockPath(self.plan, self._tables, self.cache, self._pool,
                         storage=self._storage, tier=self._tier, loads=False,
                         memo=self._requests)

    def requests(self, lp: LanePlan) -> list[ChunkRequest] | None:
        """The block of each protocol of ``lp``'s lanes (under ``chain`` a batch's lanes may
        be of several); None when this path reads held blocks only and one is not held."""
        codes = dict.fromkeys(lp.lane_protocol.tolist()) if self._chain else (lp.protocol,)
        out = []
        for code in codes:
            layout = self.layouts[code]
            if not self.loads and not self._held(code, layout):
                return None
            req = self._requests.get(code)
            if req is None:
                req = self._requests[code] = block_request(
                    self.plan, layout, storage=self._storage, tier=self._tier)
            out.append(req)
        return out

    def block(self, code: int) -> Block | None:
        """The loaded block of protocol ``code`` (the window path's source), or None when
        this path does not read it here: a held-only path whose block is not held, or a
        load that failed (the general path then reads the batch and reports why).

        It is pinned only while it is looked up: the caller's reference keeps a mapped
        tier file (never rewritten) or an in-memory block alive after the cache lets go.
        """
        layout = self.layouts[code]
        key = block_key(layout)
        if not self.loads and not self._held(code, layout):
            return None
        req = self._requests.get(code)
        if req is None:
            req = self._requests[code] = block_request(
                self.plan, layout, storage=self._storage, tier=self._tier)
        try:
            with self.cache.acquire([req]) as pins:
                found: Block = pins[key]
        except WindpipeError:
            return None
        return found

    def _held(self, code: int, layout: BlockLayout) -> bool:
        """Whether a path without loads reads ``layout``'s block: the cache holds it, or the
        tier does (mapped, it costs the cache only its mapping; once seen there it is
        taken as held: a block evicted by another process after that is built again)."""
        if self.cache.contains(block_key(layout)):
            return True
        if self._tier is None:
            return False
        if code not in self._in_tier and self._tier.holds(layout.key):
            self._in_tier.add(code)
        return code in self._in_tier

    def read(self, lp: LanePlan, requests: list[ChunkRequest]) -> LaneArrays:
        """``lp``'s lanes gathered from its pinned blocks (full lanes of one protocol: one
        copy into a new window block; else into a pooled one)."""
        with self.cache.acquire(requests) as pins:
            windows, mask = self._gather(lp, pins)
        return LaneArrays(windows, mask, {})

    def _gather(self, lp: LanePlan, pins: Any) -> tuple[np.ndarray, np.ndarray]:
        spec = self.plan.specs[lp.protocol]
        c_in, c = len(spec.input_columns), len(spec.input_columns) + len(spec.target_columns)
        loaded = {layout.protocol: (pins[block_key(layout)], layout) for layout in self.layouts
                  if block_key(layout) in pins}
        return gather_block_lanes(
            loaded, lane_stream=lp.lane_stream, lane_offset=lp.lane_offset,
            lane_protocol=lp.lane_protocol, n_rows=self._tables.n_rows, seq_len=lp.seq_len,
            c_in=c_in, take=lambda: self._pool.take(lp.n_lanes, lp.seq_len, c),
            input_fill=spec.input_fill,
        )
