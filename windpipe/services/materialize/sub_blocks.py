"""Sub-blocks: the rows of one ``block_shuffled`` shuffle block, as a block of their own.

A shuffle block (SEMANTICS 3c, :mod:`windpipe.services.planning.strategies.block_shuffled`)
is a run of consecutive chunks of one protocol, with the chunks its windows read past
its last one. Those chunks follow each other in the protocol's block
(:mod:`windpipe.services.materialize.blocks`: streams of a protocol laid end to end), so
the shuffle block is a contiguous row range ``[r0, r1)`` of that block. Its
**sub-block** is that range as a :class:`~services.materialize.blocks.BlockLayout` of
its own: the same chunks, block rows shifted by ``-r0`` (``row0`` may be negative for a
stream that starts before ``r0``), a key digesting the whole block's key and the range.
It is filled, cached, mapped from the tier and gathered from exactly as a whole block
(:func:`~services.materialize.blocks.block_request`,
:func:`~services.materialize.blocks.gather_lanes`), so a batch read from it is byte for
byte the batch read from the whole block or from chunks.

The shuffle blocks depend on the plan only (chunk layout, ``seq_len``, budget), never on
the epoch, so a sub-block's key is the same in every epoch: the tier keeps it across
epochs. Sub-blocks are made on first use; their ranges are computed once per plan.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from windpipe.services.materialize.blocks import BlockLayout, block_layouts
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.planning.rules import WindowTable
from windpipe.services.planning.strategies.block_shuffled import shuffle_blocks

__all__ = ["SubBlocks", "sub_blocks"]

_I64 = np.int64


@dataclass(eq=False)
class SubBlocks:
    """The sub-blocks of a ``block_shuffled`` plan: per shuffle block, its protocol and
    the global row range ``[lo, hi)`` its windows read; layouts made on first use."""

    plan: PlanContext
    protocol: np.ndarray  # int64 [n_blocks]
    lo: np.ndarray  # int64 [n_blocks]: first global row
    hi: np.ndarray  # int64 [n_blocks]: past the last global row a window reads

    def __post_init__(self) -> None:
        self._layouts: dict[int, BlockLayout] = {}
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """Number of shuffle blocks."""
        return int(self.lo.shape[0])

    def layout(self, block: int) -> BlockLayout:
        """The sub-block of shuffle block ``block`` (made once)."""
        with self._lock:
            found = self._layouts.get(block)
            if found is None:
                found = self._layouts[block] = self._make(block)
            return found

    def _make(self, block: int) -> BlockLayout:
        plan = self.plan
        whole = block_layouts(plan)[int(self.protocol[block])]
        g0 = plan.chunk_gstart[whole.chunks]
        g1 = g0 + plan.chunk_len[whole.chunks]
        lo, hi = int(self.lo[block]), int(self.hi[block])
        # the protocol's chunks in global (= block) order: those meeting [lo, hi) are a run
        first = int(np.searchsorted(g1, lo, side="right"))
        stop = int(np.searchsorted(g0, hi, side="left"))
        lengths = plan.chunk_len[whole.chunks[first:stop]]
        starts = whole.chunk_row[first:stop]
        r0, r1 = int(starts.min()), int((starts + lengths).max())
        digest = hashlib.blake2b(f"wpsub1\0{whole.key}\0{r0}\0{r1}".encode(), digest_size=16)
        return BlockLayout(
            protocol=whole.protocol, key=digest.hexdigest(),
            row0=np.where(whole.row0 >= 0, whole.row0 - r0, -1).astype(_I64),
            rows=r1 - r0, c_in=whole.c_in, c_out=whole.c_out,
            chunks=whole.chunks[first:stop], chunk_row=(starts - r0).astype(_I64))


_SUBS: weakref.WeakKeyDictionary[PlanContext, SubBlocks | None] = weakref.WeakKeyDictionary()
_SUBS_LOCK = threading.Lock()


def sub_blocks(plan: PlanContext) -> SubBlocks | None:
    """The sub-blocks of ``plan`` (computed once per plan); None unless it is a
    ``block_shuffled`` plan whose chunk table is the planner's."""
    with _SUBS_LOCK:
        if plan in _SUBS:
            return _SUBS[plan]
    found = _compute(plan)
    with _SUBS_LOCK:
        _SUBS[plan] = found
    return found


def _compute(plan: PlanContext) -> SubBlocks | None:
    spec = plan.spec
    if (spec.strategy != "block_shuffled" or spec.shuffle_block_bytes is None
            or spec.align_by is not None):
        return None  # not a block shuffle's schedule (``Schedule.batch_block``)
    table = plan.artifact.chunk_table
    if not np.array_equal(table.gstart, plan.chunk_gstart):
        return None  # not the chunks the schedule was cut from: the chunk path reads it
    streams = plan.streams
    windows = WindowTable.for_protocols(spec, streams.protocols)
    blocks = shuffle_blocks(streams, windows, table, budget=spec.shuffle_block_bytes)
    member = np.flatnonzero(blocks.chunk_block >= 0)
    if blocks.count == 0 or member.shape[0] == 0:
        return None
    base = streams.stream_base
    stream = streams.piece_stream[plan.chunk_piece[member]].astype(_I64)
    code = streams.protocol[stream].astype(_I64)
    end = plan.chunk_gstart[member] + plan.chunk_len[member]
    # the last row a window starting in the chunk reads: T rows on, within its stream
    last = np.minimum(end - 1 + windows.seq_len[code], base[stream + 1] - 1)
    block = blocks.chunk_block[member]
    lo = np.full(blocks.count, np.iinfo(_I64).max, dtype=_I64)
    hi = np.zeros(blocks.count, dtype=_I64)
    protocol = np.zeros(blocks.count, dtype=_I64)
    np.minimum.at(lo, block, plan.chunk_gstart[member])
    np.maximum.at(hi, block, last + 1)
    protocol[block] = code
    return SubBlocks(plan=plan, protocol=protocol, lo=lo, hi=hi)
