"""One training batch: a few vectorized copies from cached chunk matrices into outgoing buffers.

For batch ``g`` of an epoch's schedule, :class:`BatchBuilder` finds (vectorized)
every ``(lane, chunk)`` row range the lanes read, pins those chunks in the shared
cache for the duration of the copy and writes the lanes straight into the
outgoing buffers, which are wrapped zero-copy as the Arrow list columns of
``services.contract.wire``. Lanes that lie inside one chunk (all but ~T/chunk_rows of them)
are gathered per chunk with one strided ``np.take`` per matrix; only lanes that
straddle chunks or end early take a slice loop; a batch whose lanes are back-to-back
full windows of one chunk (sequential plans) is one contiguous copy per matrix.
Lane plans and the provenance columns (``take``s from per-plan Arrow arrays,
:mod:`services.materialize.plan_tables`; :mod:`services.materialize.lanes`,
:mod:`services.materialize.provenance`) are computed for blocks of 16 batches at once; each
batch then takes a zero-copy slice (blocks are aligned on the pass, so a resumed
stream sends the same bytes). Pins are released before the batch is handed to Flight,
so a client that goes away can never leave chunks pinned.

The chunk path's outgoing buffers are recycled per stream (:class:`_BufferPool`): gRPC
sends Arrow buffers without copying and holds them until written, and each holds a
reference to its numpy array, so an array whose only referent is the pool is free
again. A batch of full lanes from a block is one gather into new arrays (no second
copy into a pooled buffer).

:meth:`BatchBuilder.build_arrays` stops before Arrow (:class:`BuiltBatch`), for an
in-process reader; :meth:`BatchBuilder.record_batch` wraps the arrays for the wire.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from services.contract.errors import ErrorType, WindpipeError
from services.contract.wire import INPUT_PAD, AlignedPart, BatchMetadata
from services.materialize.blocks import block_key, block_layouts, block_request, gather_lanes
from services.materialize.cache import ChunkCache, ChunkRequest
from services.materialize.chunks import ChunkMatrices, load_chunk
from services.materialize.lanes import LanePlan, block_lanes, lane_plans
from services.materialize.plan import PlanContext
from services.materialize.plan_tables import plan_tables
from services.materialize.provenance import provenance_batch
from services.materialize.tier import Tier
from services.planning.schedule import Schedule
from services.storage.store import Storage

__all__ = [
    "BLOCK_BATCHES", "BadSegmentPolicy", "BatchBuilder", "BlockUse", "BuiltBatch",
    "chunk_request", "plan_chunk_requests",
]

BadSegmentPolicy = Literal["raise", "skip"]
BlockUse = Literal["cached", "auto", "always"]
_AUTO_SPARE = 8  # "auto": blocks when a plan's blocks leave 1/_AUTO_SPARE of the budget free
_I64 = np.int64
_POOL_SETS = 8
BLOCK_BATCHES = 16  # lane plans and provenance are built for this many batches at once


def _child(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    flat = values.reshape(-1)
    return pa.Array.from_buffers(typ, flat.shape[0], [None, pa.py_buffer(flat)])


@dataclass(frozen=True, slots=True, eq=False)
class BuiltBatch:
    """One built batch: the arrays the wire's tensor columns wrap, its provenance columns
    and its metadata. The Flight server sends it as one record batch
    (:meth:`BatchBuilder.record_batch`); an in-process reader hands the arrays to torch
    as they are, so both see the same bytes."""

    inputs: np.ndarray  # float32 (B, T, C_in)
    targets: np.ndarray  # float32 (B, T, C_out)
    mask: np.ndarray  # uint8 (B, T)
    has_channel: np.ndarray  # uint8 (B, C): C = meta.channels
    provenance: Callable[[], pa.RecordBatch]  # the wire's columns after the first four
    provenance_bytes: int  # their Arrow bytes (a share of their block's); 0: not built yet
    meta: BatchMetadata

    @property
    def nbytes(self) -> int:
        """Bytes of the batch as sent: its tensors and (when built) its provenance."""
        return int(self.inputs.nbytes + self.targets.nbytes + self.mask.nbytes
                   + self.has_channel.nbytes + self.provenance_bytes)


def _given(value: pa.RecordBatch) -> pa.RecordBatch:
    return value


class _BufferPool:
    """Outgoing ``(inputs, targets, mask)`` arrays of one stream, reused once released."""

    def __init__(self) -> None:
        self._sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def take(self, n: int, t: int, c_in: int,
             c_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shapes = ((n, t, c_in), (n, t, c_out), (n, t))
        for i, arrays in enumerate(self._sets):
            # referenced only by the pool's tuple (and getrefcount's argument): free
            if (sys.getrefcount(arrays[0]) == 2 and sys.getrefcount(arrays[1]) == 2
                    and sys.getrefcount(arrays[2]) == 2):
                if tuple(a.shape for a in arrays) == shapes:
                    return arrays
                del self._sets[i]
                break
        arrays = (np.empty(shapes[0], np.float32), np.empty(shapes[1], np.float32),
                  np.empty(shapes[2], np.uint8))
        if len(self._sets) < _POOL_SETS:
            self._sets.append(arrays)
        return arrays


class BatchBuilder:
    """Materializes batches of one plan through the shared cache (one per stream)."""

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
    ) -> None:
        self.plan = plan
        self.storage = storage
        self.cache = cache
        self.schema = schema
        self.on_bad_segment = on_bad_segment
        self.tier = tier
        self.blocks = blocks
        self.lazy_provenance = lazy_provenance
        self.bad_paths: dict[str, str] = {}
        self.tables = plan_tables(plan)
        self.layouts = block_layouts(plan)
        self._chain = plan.spec.cross_protocol_state_carry == "chain"
        whole = sum(x.nbytes for x in self.layouts)
        self._fits = whole + cache.budget_bytes // _AUTO_SPARE <= cache.budget_bytes and (
            tier is None or tier.fits(whole, len(self.layouts)))
        self._requests: dict[int, ChunkRequest] = {}
        self._block_requests: dict[int, ChunkRequest] = {}
        self._pool = _BufferPool()
        self._prov: dict[int, tuple[pa.RecordBatch, int, int, int]] = {}
        self._prov_schema = pa.schema(list(schema)[4:])

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
        codes = dict.fromkeys(lp.lane_protocol.tolist()) if self._chain else (lp.protocol,)
        whole = self.blocks == "always" or (self.blocks == "auto" and self._fits)
        out = []
        for code in codes:
            layout = self.layouts[code]
            if not whole and not self.cache.contains(block_key(layout)):
                return None
            req = self._block_requests.get(code)
            if req is None:
                req = self._block_requests[code] = block_request(
                    self.plan, layout, storage=self.storage, tier=self.tier)
            out.append(req)
        return out

    def read_ahead_requests(self, lp: LanePlan) -> list[ChunkRequest]:
        """What to load ahead for a batch: its blocks, or its chunks."""
        blocks = self.block_requests(lp)
        return blocks if blocks is not None else self.requests(lp)

    def _request(self, c: int) -> ChunkRequest:
        req = self._requests.get(c)
        if req is None:
            if self.storage is None:  # a block-only reader never gets here
                raise WindpipeError(ErrorType.INTERNAL,
                                    "this batch builder reads blocks only (no storage)")
            req = self._requests[c] = chunk_request(self.plan, self.storage, c)
        return req

    def requests(self, lp: LanePlan, *, skip_lanes: set[int] | None = None) -> list[ChunkRequest]:
        """The chunk loads of a lane plan (lanes in ``skip_lanes`` left out)."""
        if not skip_lanes:
            return [self._request(c) for c in lp.chunks]
        keep = ~np.isin(lp.rng_lane, np.fromiter(skip_lanes, dtype=_I64))
        return [self._request(c) for c in dict.fromkeys(lp.rng_chunk[keep].tolist())]

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
        blocks = self.block_requests(lp)
        if blocks is not None:
            try:
                pins = self.cache.acquire(blocks)
            except WindpipeError as exc:
                if self.blocks == "always" or exc.type not in (ErrorType.SEGMENT_ERROR,
                                                               ErrorType.RESOURCE_EXHAUSTED):
                    raise
                self._fits, self.blocks = False, "cached"  # read what can be read, by chunks
            else:
                with pins:
                    arrays = self._gather_blocks(lp, pins)
                return self._built(schedule, lp, arrays, {}, batch_idx)
        skipped: dict[int, tuple[str, str]] = self._skipped_by_known_bad(lp)
        while True:
            try:
                pins = self.cache.acquire(self.requests(lp, skip_lanes=set(skipped)))
                break
            except WindpipeError as exc:
                path = exc.details.get("path")
                if (self.on_bad_segment != "skip" or exc.type != ErrorType.SEGMENT_ERROR
                        or not path or path in self.bad_paths):
                    raise
                self.bad_paths[str(path)] = exc.message
                skipped = self._skipped_by_known_bad(lp)
        with pins:
            arrays = self._copy(lp, pins, skipped)
        return self._built(schedule, lp, arrays, skipped, batch_idx)

    def _skipped_by_known_bad(self, lp: LanePlan) -> dict[int, tuple[str, str]]:
        if not self.bad_paths:
            return {}
        out: dict[int, tuple[str, str]] = {}
        for i, key in enumerate(lp.keys):
            if key.path in self.bad_paths:
                out.setdefault(int(lp.rng_lane[i]), (key.path, self.bad_paths[key.path]))
        return out

    def _gather_blocks(self, lp: LanePlan, pins: Any) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
        spec = self.plan.specs[lp.protocol]
        loaded = {layout.protocol: (pins[block_key(layout)], layout) for layout in self.layouts
                  if block_key(layout) in pins}
        return gather_lanes(
            loaded, lane_stream=lp.lane_stream, lane_offset=lp.lane_offset,
            lane_protocol=lp.lane_protocol, n_rows=self.tables.n_rows, seq_len=lp.seq_len,
            take=lambda: self._pool.take(lp.n_lanes, lp.seq_len, len(spec.input_columns),
                                         len(spec.target_columns)),
        )

    def _copy(self, lp: LanePlan, pins: Any,
              skipped: dict[int, tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tables = self.tables
        spec = self.plan.specs[lp.protocol]
        c_in, c_out = len(spec.input_columns), len(spec.target_columns)
        n, t = lp.n_lanes, lp.seq_len
        inputs, targets, mask = self._pool.take(n, t, c_in, c_out)
        if lp.tiled_src >= 0 and not skipped:
            m = pins[self.plan.chunk_keys[lp.chunks[0]]]
            s0 = lp.tiled_src
            np.copyto(inputs, m.inputs[s0 : s0 + n * t].reshape(n, t, c_in))
            np.copyto(targets, m.targets[s0 + 1 : s0 + 1 + n * t].reshape(n, t, c_out))
            mask.fill(1)
            return inputs, targets, mask
        off = lp.lane_offset
        avail = np.where(off >= 0, tables.n_rows[lp.lane_stream] - off, 0)
        if skipped:
            avail[list(skipped)] = 0
        n_in = np.minimum(avail, t)
        n_tg = np.clip(avail - 1, 0, t)
        mask.fill(1)
        empty = np.flatnonzero(avail <= 0)  # padding lanes: at once
        if empty.shape[0]:
            inputs[empty] = INPUT_PAD
            targets[empty] = np.nan
            mask[empty] = 0
        for b in np.flatnonzero((n_in < t) & (avail > 0)).tolist():
            inputs[b, int(n_in[b]):] = INPUT_PAD
        for b in np.flatnonzero((n_tg < t) & (avail > 0)).tolist():
            targets[b, int(n_tg[b]):] = np.nan
            mask[b, int(n_tg[b]):] = 0
        lanes, src, win, cnt = lp.rng_lane, lp.rng_src, lp.rng_win, lp.rng_len
        full = (win == 0) & (cnt == t + 1)
        if skipped:
            live = ~np.isin(lanes, np.fromiter(skipped, dtype=_I64))
            full &= live
        else:
            live = None
        matrices: dict[int, ChunkMatrices] = {}
        keys = self.plan.chunk_keys
        for c in lp.chunks:
            if keys[c] in pins:
                matrices[c] = pins[keys[c]]
        if full.any():
            self._gather_full(lp, matrices, full, inputs, targets)
        rest = np.flatnonzero(~full if live is None else ~full & live)
        if rest.shape[0]:
            chunk = lp.rng_chunk
            for i in rest.tolist():
                m = matrices[int(chunk[i])]
                b, s0, w, k = int(lanes[i]), int(src[i]), int(win[i]), int(cnt[i])
                i_hi = min(w + k, t)
                if w < i_hi:
                    inputs[b, w:i_hi] = m.inputs[s0 : s0 + i_hi - w]
                t_lo = max(w, 1)
                if t_lo < w + k:
                    targets[b, t_lo - 1 : w + k - 1] = m.targets[s0 + t_lo - w : s0 + k]
        return inputs, targets, mask

    @staticmethod
    def _gather_full(lp: LanePlan, matrices: dict[int, ChunkMatrices], full: np.ndarray,
                     inputs: np.ndarray, targets: np.ndarray) -> None:
        """Lanes whose window (and target row) lie inside one chunk: one take per chunk."""
        t = lp.seq_len
        chunk = lp.rng_chunk
        one_chunk = len(lp.chunks) == 1
        for c in lp.chunks:
            sel = full if one_chunk else full & (chunk == c)
            idx = np.flatnonzero(sel)
            if not idx.shape[0]:
                continue
            m = matrices[c]
            lanes, src = lp.rng_lane[idx], lp.rng_src[idx]
            contiguous = int(lanes[-1]) - int(lanes[0]) + 1 == lanes.shape[0] and bool(
                (np.diff(lanes) == 1).all())
            n = lanes.shape[0]
            tiled = contiguous and (n == 1 or bool((np.diff(src) == t).all()))
            for mat, out, shift in ((m.inputs, inputs, 0), (m.targets, targets, 1)):
                rows, width = mat.shape
                if tiled:  # windows back to back in the chunk: one contiguous copy
                    s0 = int(src[0]) + shift
                    out[lanes[0] : lanes[0] + n] = mat[s0 : s0 + n * t].reshape(n, t, width)
                    continue
                # every T-row window of the chunk (overlapping, no copy)
                view = np.ndarray((rows - t + 1, t, width), dtype=mat.dtype, buffer=mat,
                                  strides=(mat.strides[0], mat.strides[0], mat.strides[1]))
                if contiguous:
                    out[lanes[0] : lanes[-1] + 1] = view[src + shift]
                else:
                    out[lanes] = view[src + shift]

    def prepare(self, schedule: Schedule, gs: np.ndarray) -> None:
        """Compute the provenance columns of global batches ``gs`` together (vectorized).

        :meth:`build` of each of them then takes a zero-copy slice; the per-batch Arrow
        and numpy overhead of these 11 columns is paid once per block. A builder with
        ``lazy_provenance`` (an in-process reader) computes a batch's columns only when
        asked for them (``BuiltBatch.provenance()``: ``Batch.state``), so not here.
        """
        gs = np.asarray(gs, dtype=_I64)
        if not gs.shape[0] or self.lazy_provenance:
            return
        _, counts, ptr, idx = block_lanes(schedule, gs)
        prov = self._provenance(
            schedule.lane_stream[idx].astype(_I64, copy=False),
            schedule.lane_offset[idx].astype(_I64, copy=False),
            schedule.lane_protocol[idx],
            np.repeat(schedule.batch_seq_len[gs].astype(_I64), counts),
            None if schedule.lane_key is None else schedule.lane_key[idx],
        )
        if len(self._prov) > 4 * BLOCK_BATCHES:
            self._prov.clear()
        lanes, nbytes = max(1, prov.num_rows), prov.nbytes
        for k, g in enumerate(gs.tolist()):
            self._prov[g] = (prov, int(ptr[k]), int(counts[k]), nbytes * int(counts[k]) // lanes)

    def _provenance(self, lane_stream: np.ndarray, offsets: np.ndarray,
                    lane_protocol: np.ndarray, seq_len: np.ndarray,
                    lane_key: np.ndarray | None = None) -> pa.RecordBatch:
        return provenance_batch(self.plan, self.tables, self._prov_schema,
                                lane_stream=lane_stream, offsets=offsets,
                                lane_protocol=lane_protocol, seq_len=seq_len,
                                lane_key=lane_key)

    def record_batch(self, built: BuiltBatch) -> pa.RecordBatch:
        """The wire record batch of a built batch: its arrays wrapped zero-copy."""
        inputs, targets, mask = built.inputs, built.targets, built.mask
        (n, t, c_in), c_out = inputs.shape, targets.shape[2]
        offsets = self.tables.offsets
        columns = [
            pa.ListArray.from_arrays(offsets(n, t * c_in), _child(inputs, pa.float32())),
            pa.ListArray.from_arrays(offsets(n, t * c_out), _child(targets, pa.float32())),
            pa.ListArray.from_arrays(offsets(n, t), _child(mask, pa.uint8())),
            pa.ListArray.from_arrays(offsets(n, built.has_channel.shape[1]),
                                     _child(built.has_channel, pa.uint8())),
            *built.provenance().columns,
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _built(
        self, schedule: Schedule, lp: LanePlan,
        arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
        skipped: dict[int, tuple[str, str]], batch_idx: int,
    ) -> BuiltBatch:
        inputs, targets, mask = arrays
        n, t = lp.n_lanes, lp.seq_len
        c_in, c_out = inputs.shape[2], targets.shape[2]
        g = lp.global_batch
        cached = self._prov.pop(g, None)
        provenance: Callable[[], pa.RecordBatch]
        if cached is not None and not skipped:
            block, row, count, prov_bytes = cached
            prov = block.slice(row, count) if count != block.num_rows else block
            provenance = functools.partial(_given, prov)
        else:
            offsets = lp.lane_offset
            if skipped:
                offsets = offsets.copy()
                offsets[list(skipped)] = -1
            provenance = functools.partial(self._provenance, lp.lane_stream, offsets,
                                           lp.lane_protocol, np.full(n, t, dtype=_I64),
                                           lp.lane_key)
            prov_bytes = 0
            if not self.lazy_provenance:
                prov = provenance()
                provenance, prov_bytes = functools.partial(_given, prov), prov.nbytes
        group = int(schedule.batch_group[g])
        code = int(schedule.batch_protocol[g])
        has_channel = self._has_channel(code, lp.lane_stream, mask)
        parts = schedule.parts
        aligned = None
        if parts > 1:  # positions count parts; the consumer's batch is their group
            aligned = AlignedPart(protocol=self.plan.streams.protocols[code], part=g % parts,
                                  parts=parts, has_data=tuple((lp.lane_stream >= 0).tolist()))
        meta = BatchMetadata(
            batch_idx=batch_idx // parts, global_batch=g // parts, split=self.plan.spec.split,
            seq_len=t, c_in=c_in, c_out=c_out,
            input_columns=self.plan.specs[code].input_columns,
            target_columns=self.plan.specs[code].target_columns,
            channels=self.plan.specs[code].channels,
            stateful_group_idx=group if group >= 0 else None,
            stateful_step_idx=int(schedule.batch_step[g]) if group >= 0 else None,
            stateful_steps=int(schedule.batch_steps[g]) if group >= 0 else None,
            skipped_lanes=tuple(
                {"lane": b, "path": path, "error": err}
                for b, (path, err) in sorted(skipped.items())
            ),
            aligned=aligned,
        )
        return BuiltBatch(inputs=inputs, targets=targets, mask=mask, has_channel=has_channel,
                          provenance=provenance, provenance_bytes=prov_bytes, meta=meta)

    def _has_channel(self, code: int, lane_stream: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Each lane's ``has_channel`` row (its stream's channel variant); lanes whose stream
        lacks a target channel get a False mask (SEMANTICS 5). One take per batch."""
        plan = self.plan
        out: np.ndarray = plan.channel_rows[code][plan.stream_variant[lane_stream]]
        if lane_stream.shape[0] and int(lane_stream.min()) < 0:  # aligned: key without data
            out[lane_stream < 0] = 0
        if len(plan.variants) > len(plan.specs):  # some stream lacks a column
            lacking = plan.target_missing[lane_stream]
            if lacking.any():
                mask[lacking] = 0
        return out


def chunk_request(plan: PlanContext, storage: Storage, c: int) -> ChunkRequest:
    """The cache request of chunk ``c`` of ``plan``'s chunk table: key, exact size, loader."""
    spec = plan.variants[int(plan.chunk_spec[c])]
    info = plan.piece_info(int(plan.chunk_piece[c]))
    index = int(plan.chunk_index[c])

    def load() -> tuple[ChunkMatrices, int]:
        return load_chunk(storage, info, index, spec)

    return ChunkRequest(key=plan.chunk_keys[c], nbytes=spec.nbytes(int(plan.chunk_len[c])),
                        load=load)


def plan_chunk_requests(plan: PlanContext, storage: Storage) -> list[ChunkRequest]:
    """Every chunk of a plan's streams (its split), in stream order (``warm``)."""
    return [chunk_request(plan, storage, c) for c in range(len(plan.chunk_keys))]
