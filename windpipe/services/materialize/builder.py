"""One training batch: a lane plan, a read path, an assembler.

For batch ``g`` of an epoch's schedule, :class:`BatchBuilder` finds (vectorized)
every ``(lane, chunk)`` row range the lanes read (:mod:`windpipe.services.materialize.lanes`,
computed for blocks of 16 batches at once), reads the lanes on one of its read
paths (:mod:`windpipe.services.materialize.read_paths`: from blocks, one gather per matrix; a
``block_shuffled`` batch from its shuffle block's sub-block, one gather too; or
from chunks, a few vectorized copies per chunk; each pins what it reads for the
duration of the copy only, so a client that goes away can never leave anything
pinned) and puts the batch together (:mod:`windpipe.services.materialize.assembler`:
``has_channel``, provenance, metadata; the Arrow record batch for the wire).

A batch whose lanes are all full windows of one protocol takes a shortcut in an
in-process reader: :meth:`BatchBuilder.window_pass` (:mod:`windpipe.services.materialize.windows`,
one copy per batch, no lane plan). Which path reads any other batch is the builder's
``blocks=`` option, a row of
:data:`~services.materialize.read_paths.BLOCK_USES`; a block path that cannot load its
blocks hands the stream to :meth:`~services.materialize.read_paths.BlockPath.held_only`
and the chunk path.

:meth:`BatchBuilder.build_arrays` stops before Arrow (:class:`BuiltBatch`), for an
in-process reader; :meth:`BatchBuilder.record_batch` wraps the arrays for the wire.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from windpipe.services.contract.errors import InternalError, WindpipeError
from windpipe.services.contract.wire import BatchMetadata
from windpipe.services.materialize.assembler import BLOCK_BATCHES, BatchAssembler, BuiltBatch
from windpipe.services.materialize.blocks import BlockLayout, block_key
from windpipe.services.materialize.cache import ChunkCache, ChunkRequest
from windpipe.services.materialize.lanes import LanePlan, lane_plans
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import plan_tables
from windpipe.services.materialize.read_paths import (
    FALLBACK_ERRORS,
    BadSegmentPolicy,
    BlockPath,
    BlockUse,
    ChunkPath,
    LaneArrays,
    ReadPath,
    SubBlockPath,
    chunk_request,
    plan_chunk_requests,
    read_paths,
)
from windpipe.services.materialize.tier import Block, Tier
from windpipe.services.materialize.windows import WindowPass
from windpipe.services.planning.schedule import Schedule
from windpipe.services.storage.store import Storage

__all__ = [
    "BLOCK_BATCHES", "BadSegmentPolicy", "BatchBuilder", "BlockUse", "BuiltBatch",
    "chunk_request", "plan_chunk_requests",
]

_I64 = np.int64


class BatchBuilder:
    """Materializes batches of one plan through the shared cache (one per stream).

    ``sub_blocks=False`` reads a ``block_shuffled`` batch the block path does not by
    chunks, as before sub-blocks (a side-by-side reference)."""

    def __init__(
        self,
        plan: PlanContext,
        storage: Storage | None,
        cache: ChunkCache,
        schema: pa.Schema,
        *,
        on_bad_segment: BadSegmentPolicy = "raise",
        tier: Tier | None = None,
        blocks: BlockUse = "cached",
        lazy_provenance: bool = False,
        sub_blocks: bool = True,
    ) -> None:
        self.plan = plan
        self.storage = storage
        self.cache = cache
        self.schema = schema
        self.tier = tier
        self.tables = plan_tables(plan)
        self._blocks: BlockPath
        self._subs: SubBlockPath | None  # block_shuffled batches (None: blocks only)
        self._chunks: ChunkPath | None  # None: blocks only (a block failure is raised)
        self._blocks, self._subs, self._chunks = read_paths(
            plan, self.tables, cache, use=blocks, storage=storage, tier=tier,
            on_bad_segment=on_bad_segment, sub_blocks=sub_blocks)
        self._assembler = BatchAssembler(plan, self.tables, schema,
                                         lazy_provenance=lazy_provenance)

    @property
    def bad_paths(self) -> dict[str, str]:
        """Segments this stream skips (path -> error), under ``on_bad_segment="skip"``."""
        return {} if self._chunks is None else self._chunks.bad_paths

    # -- planning ---------------------------------------------------------------------

    def lane_plan(self, schedule: Schedule, g: int) -> LanePlan:
        """The (lane, chunk) ranges of global batch ``g`` (vectorized)."""
        return self.lane_plans(schedule, np.asarray([g], dtype=_I64))[0]

    def lane_plans(self, schedule: Schedule, gs: np.ndarray) -> list[LanePlan]:
        """The lane plans of global batches ``gs``, computed together (one pass of numpy)."""
        return lane_plans(self.plan, self.tables, schedule, gs)

    def block_requests(self, lp: LanePlan) -> list[ChunkRequest] | None:
        """The block loads of a batch that takes the block path, else None.

        With ``blocks="always"`` (an in-process reader) every batch does; with
        ``"cached"`` a batch does when the blocks of all its lanes' protocols are in the
        cache (``full_in_mem`` warms them); ``"auto"`` (the Flight server) also when the
        plan's blocks fit in the cache budget with an eighth of it to spare (and fit the
        tier), so a split the cache can hold whole is held whole. A segment that cannot be
        read, or blocks that do not fit after all, send the builder back to chunks (where
        ``on_bad_segment`` applies).
        """
        return self._blocks.requests(lp)

    def read_ahead_requests(self, lp: LanePlan) -> list[ChunkRequest]:
        """What to load ahead for a batch: its blocks, its sub-block, or its chunks."""
        return self._path(lp)[1]

    def read_ahead_block(self, schedule: Schedule, g: int) -> bool:
        """Start decoding the sub-block of ``block_shuffled`` global batch ``g`` on a worker
        thread (:class:`~services.materialize.read_paths.SubBlockPath`); False when
        ``g`` is not read from sub-blocks (its loads are then
        :meth:`read_ahead_requests`)."""
        if self._subs is None:
            return False
        self._subs.bind(schedule)
        return self._subs.read_ahead(schedule, g)

    def requests(self, lp: LanePlan, *, skip_lanes: set[int] | None = None) -> list[ChunkRequest]:
        """The chunk loads of a lane plan (lanes in ``skip_lanes`` left out)."""
        return self._chunk_path().requests(lp, skip_lanes=skip_lanes)

    # -- materialization --------------------------------------------------------------

    def build(self, schedule: Schedule, g: int, *, batch_idx: int,
              lp: LanePlan | None = None) -> tuple[pa.RecordBatch, BatchMetadata]:
        """The record batch and metadata of global batch ``g`` (``batch_idx`` in the pass)."""
        built = self.build_arrays(schedule, g, batch_idx=batch_idx, lp=lp)
        return self.record_batch(built), built.meta

    def build_arrays(self, schedule: Schedule, g: int, *, batch_idx: int,
                     lp: LanePlan | None = None) -> BuiltBatch:
        """Global batch ``g`` (``batch_idx`` in the pass) as arrays, before Arrow."""
        lp = lp if lp is not None else self.lane_plan(schedule, g)
        if self._subs is not None:
            self._subs.bind(schedule)
        return self._assembler.assemble(schedule, lp, self._read(lp), batch_idx=batch_idx)

    def prepare(self, schedule: Schedule, gs: np.ndarray) -> None:
        """Compute the provenance columns of global batches ``gs`` together (vectorized):
        :meth:`build` of each then takes a zero-copy slice (``BatchAssembler.prepare``)."""
        self._assembler.prepare(schedule, gs)

    def record_batch(self, built: BuiltBatch) -> pa.RecordBatch:
        """The wire record batch of a built batch: its arrays wrapped zero-copy."""
        return self._assembler.record_batch(built)

    def window_pass(self, schedule: Schedule, batches: np.ndarray, *, start: int,
                    end: int) -> WindowPass:
        """The window path of the pass positions ``start..end`` (:mod:`.windows`: full
        windows of one protocol whose block is loaded, one copy each, no lane plan and no
        read-ahead). With lazy provenance (an in-process reader) a batch's provenance is
        computed when read; else (the Flight server, which sends it) it is taken from
        blocks prepared ahead, as the general path takes it (:meth:`prepare`). Without a
        tier a block is read only while its cache holds it (an evicted one is loaded again
        by the general path, within the budget)."""
        layouts = self._blocks.layouts
        assembler = self._assembler
        return WindowPass(
            self.plan, self.tables, layouts, schedule, batches, start=start, end=end,
            block=self._block, provenance=assembler.lane_provenance,
            prepared=None if assembler.lazy_provenance else functools.partial(
                assembler.prepared, schedule, batches),
            held=None if self.tier is not None else _HeldBlocks(self.cache, layouts))

    # -- read paths -------------------------------------------------------------------

    def _block(self, code: int) -> Block | None:
        """The loaded block of protocol ``code`` on the current block path (it changes to
        :meth:`BlockPath.held_only` after a failed load)."""
        return self._blocks.block(code)

    def _path(self, lp: LanePlan) -> tuple[ReadPath, list[ChunkRequest]]:
        """The path that reads ``lp`` and its loads: the block path when it takes it, then
        the sub-block path (a ``block_shuffled`` batch), then chunks."""
        requests = self._blocks.requests(lp)
        if requests is not None:
            return self._blocks, requests
        if self._subs is not None:
            requests = self._subs.requests(lp)
            if requests is not None:
                return self._subs, requests
        chunks = self._chunk_path()
        return chunks, chunks.requests(lp)

    def _read(self, lp: LanePlan) -> LaneArrays:
        path, requests = self._path(lp)
        if path is self._chunks or self._chunks is None:
            return path.read(lp, requests)
        try:
            return path.read(lp, requests)
        except WindpipeError as exc:
            if exc.type not in FALLBACK_ERRORS:
                raise
            # read what can be read, by chunks (where ``on_bad_segment`` applies)
            if path is self._subs and self._subs is not None:
                self._subs.disable()
            else:
                self._blocks = self._blocks.held_only()
        return self._chunks.read(lp, self._chunks.requests(lp))

    def _chunk_path(self) -> ChunkPath:
        if self._chunks is None:
            raise InternalError("this batch builder reads blocks only (blocks='always')")
        return self._chunks


class _HeldBlocks:
    """Whether the cache still holds a protocol's block, asked once a batch by the window
    path: a block seen held stands until the cache evicts something (then the cache is
    asked again, under its lock); one not held is asked about every time."""

    def __init__(self, cache: ChunkCache, layouts: tuple[BlockLayout, ...]) -> None:
        self._cache = cache
        self._keys = [block_key(x) for x in layouts]
        self._seen = -1
        self._held: set[int] = set()

    def __call__(self, code: int) -> bool:
        evictions = self._cache.evictions
        if evictions != self._seen:
            self._held.clear()
            self._seen = evictions
        if code in self._held:
            return True
        if self._cache.contains(self._keys[code]):
            self._held.add(code)
            return True
        return False
