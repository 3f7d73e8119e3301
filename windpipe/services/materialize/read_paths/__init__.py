"""How a batch's lanes are read: one small module per read path, behind :class:`ReadPath`.

| path | module | reads a batch |
|---|---|---|
| blocks | :mod:`.blocks` | from the blocks of its lanes' protocols: one gather per matrix |
| sub-blocks | :mod:`.sub_blocks` | ``block_shuffled``: from its shuffle block's rows, one gather |
| chunks | :mod:`.chunks` | from its pinned chunks; lanes of bad segments skipped under ``"skip"`` |

A builder's ``blocks=`` option is a row of :data:`BLOCK_USES`: whether its block path
loads blocks (``"auto"``: when the plan's blocks fit the cache or the tier holds them,
:func:`blocks_fit`) or reads only those the cache or the tier holds, and whether the
chunk path reads what the block path does not.
:func:`read_paths` makes the two paths of a builder. When a block path that loads
cannot (a segment it cannot read, blocks that do not fit after all) and chunks follow
it, the builder goes on with :meth:`BlockPath.held_only` (``on_bad_segment`` then
applies on the chunk path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from windpipe.services.contract.errors import ErrorType
from windpipe.services.materialize.blocks import BlockLayout, block_layouts
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.materialize.read_paths.base import BufferPool, LaneArrays, ReadPath, Skipped
from windpipe.services.materialize.read_paths.blocks import BlockPath
from windpipe.services.materialize.read_paths.chunks import (
    BadSegmentPolicy,
    ChunkPath,
    chunk_request,
    plan_chunk_requests,
)
from windpipe.services.materialize.read_paths.sub_blocks import SubBlockPath
from windpipe.services.materialize.tier import Tier
from windpipe.services.storage.store import Storage

__all__ = [
    "BLOCK_USES", "FALLBACK_ERRORS", "BadSegmentPolicy", "BlockPath", "BlockUse", "BlockUseRule",
    "BufferPool", "ChunkPath", "LaneArrays", "ReadPath", "Skipped", "SubBlockPath", "blocks_fit",
    "chunk_request", "plan_chunk_requests", "read_paths",
]

BlockUse = Literal["cached", "auto", "always"]
AUTO_SPARE = 8  # "auto": blocks when a plan's blocks leave 1/AUTO_SPARE of the budget free
# a loading block path that fails with one of these hands the batch to the chunk path
FALLBACK_ERRORS = frozenset({ErrorType.SEGMENT_ERROR, ErrorType.RESOURCE_EXHAUSTED})


@dataclass(frozen=True, slots=True)
class BlockUseRule:
    """What one value of a builder's ``blocks=`` option means."""

    loads: bool  # the block path loads the blocks it needs (else: reads held ones only)
    if_fits: bool  # ... only when the plan's blocks fit (:func:`blocks_fit`)
    chunks: bool  # the chunk path reads what the block path does not (and what it fails)


BLOCK_USES: dict[BlockUse, BlockUseRule] = {
    # an in-process reader: every batch from blocks
    "always": BlockUseRule(loads=True, if_fits=False, chunks=False),
    # the Flight server: a split the cache can hold whole is held whole
    "auto": BlockUseRule(loads=True, if_fits=True, chunks=True),
    # blocks when warmed (``full_in_mem``), else chunks
    "cached": BlockUseRule(loads=False, if_fits=False, chunks=True),
}


def blocks_fit(layouts: tuple[BlockLayout, ...], cache: ChunkCache, tier: Tier | None) -> bool:
    """Whether a plan's blocks fit the cache budget with an eighth of it to spare (and the
    tier, when there is one), or, larger than the cache, the tier holds them all already.

    The second case is the tier as the capacity level: mapped blocks cost the cache only
    their mapping, so the pass is one gather per batch from the page cache instead of
    decoding chunks from storage again. Blocks larger than the cache are not decoded at
    a stream's first batch (a whole protocol's rows would stall it past a client's read
    deadline); the Flight server fills the tier behind the stream instead
    (``windpipe.flight_server.tier_fill``).
    """
    whole = sum(x.nbytes for x in layouts)
    in_cache = whole + cache.budget_bytes // AUTO_SPARE <= cache.budget_bytes
    if tier is None:
        return in_cache
    if not tier.fits(whole, blocks=len(layouts)):
        return False
    return in_cache or all(tier.holds(x.key) for x in layouts)


def read_paths(plan: PlanContext, tables: PlanTables, cache: ChunkCache, *, use: BlockUse,
               storage: Storage | None, tier: Tier | None,
               on_bad_segment: BadSegmentPolicy, sub_blocks: bool = True,
               ) -> tuple[BlockPath, SubBlockPath | None, ChunkPath | None]:
    """A builder's block path, its sub-block path (None: blocks only) and the chunk path
    after them (None: blocks only), sharing one buffer pool. The sub-block path reads a
    ``block_shuffled`` batch whose whole block the block path does not read (None also
    without ``sub_blocks``: such batches are read by chunks)."""
    rule = BLOCK_USES[use]
    pool = BufferPool()
    loads = rule.loads and (not rule.if_fits or blocks_fit(block_layouts(plan), cache, tier))
    blocks = BlockPath(plan, tables, cache, pool, storage=storage, tier=tier, loads=loads)
    if not rule.chunks:
        return blocks, None, None
    subs = (SubBlockPath(plan, tables, cache, pool, storage=storage, tier=tier)
            if sub_blocks else None)
    chunks = ChunkPath(plan, tables, cache, pool, storage=storage, on_bad_segment=on_bad_segment)
    return blocks, subs, chunks
