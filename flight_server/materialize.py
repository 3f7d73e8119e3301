"""One training batch: a few vectorized copies from cached chunk matrices into outgoing buffers.

For batch ``g`` of an epoch's schedule, :class:`BatchBuilder` finds (vectorized)
every ``(lane, chunk)`` row range the lanes read, pins those chunks in the shared
cache for the duration of the copy and writes the lanes straight into the
outgoing buffers, which are wrapped zero-copy as the Arrow list columns of
``contract.wire``. Lanes that lie inside one chunk (all but ~T/chunk_rows of them)
are gathered per chunk with one strided ``np.take`` per matrix; only lanes that
straddle chunks or end early take a slice loop; a batch whose lanes are back-to-back
full windows of one chunk (sequential plans) is one contiguous copy per matrix.
Lane plans and the provenance columns (``take``s from per-plan Arrow arrays,
:class:`PlanTables`) are computed for blocks of 16 batches at once; each batch then
takes a zero-copy slice (blocks are aligned on the pass, so a resumed stream sends
the same bytes). Pins are
released before the batch is handed to Flight, so a client that goes away can
never leave chunks pinned.

Outgoing buffers are recycled per stream (:class:`_BufferPool`): gRPC sends Arrow
buffers without copying and holds them until written, and each holds a reference
to its numpy array, so an array whose only referent is the pool is free again.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from catalog.schedule import Schedule, lane_segment_refs, split_ranges
from catalog.storage import Storage
from contract.errors import ErrorType, WindpipeError
from contract.wire import INPUT_PAD, BatchMetadata
from flight_server.cache import ChunkCache, ChunkRequest
from flight_server.chunks import ChunkKey, ChunkMatrices, load_chunk
from flight_server.plans import PlanContext

__all__ = [
    "BLOCK_BATCHES",
    "BadSegmentPolicy",
    "BatchBuilder",
    "LanePlan",
    "PlanTables",
    "chunk_loader",
    "plan_tables",
]

BadSegmentPolicy = Literal["raise", "skip"]
_I64 = np.int64
_POOL_SETS = 8
_REPEATS = 4096
BLOCK_BATCHES = 16  # lane plans and provenance are built for this many batches at once


@dataclass(frozen=True, eq=False)
class LanePlan:
    """Where the lanes of one batch read: one entry per (lane, chunk) range."""

    global_batch: int
    protocol: int
    lane_lo: int
    n_lanes: int
    seq_len: int
    lane_stream: np.ndarray
    lane_offset: np.ndarray
    lane_protocol: np.ndarray
    rng_lane: np.ndarray
    rng_chunk: np.ndarray
    rng_src: np.ndarray
    rng_win: np.ndarray
    rng_len: np.ndarray
    keys: list[ChunkKey] = field(default_factory=list)  # per range
    chunks: tuple[int, ...] = ()  # distinct chunks, in first-use order
    # >= 0 when every lane is a full window (T inputs + the target row) of ONE chunk and
    # lane b starts at row tiled_src + b*T: the batch is one contiguous copy per matrix
    tiled_src: int = -1


@dataclass(frozen=True, eq=False)
class PlanTables:
    """Per-plan lookup tables of the hot path (built once per plan by :func:`plan_tables`)."""

    stream_base: np.ndarray  # int64 [S+1]
    n_rows: np.ndarray  # int64 [S]
    piece_ptr: np.ndarray
    piece_mrid: np.ndarray
    piece_path: pa.Array  # string [P + 1], the last entry ""
    protocol: pa.Array  # string per protocol code
    group_key: pa.Array  # string per stream
    alignment_key: pa.Array  # string per stream
    input_columns: tuple[tuple[str, ...], ...]  # per protocol code
    target_columns: tuple[tuple[str, ...], ...]
    list_offsets: dict[tuple[int, int], pa.Array] = field(default_factory=dict)
    repeats: dict[tuple[str, int, int], pa.Array] = field(default_factory=dict)

    def take(self, name: str, idx: np.ndarray) -> pa.Array:
        """``getattr(self, name).take(idx)``; runs of one value come from a bounded cache
        (a batch's lanes usually share one stream and one piece)."""
        values: pa.Array = getattr(self, name)
        n = int(idx.shape[0])
        if n == 0 or idx[0] != idx[-1] or not (idx == idx[0]).all():
            return values.take(idx)
        key = (name, int(idx[0]), n)
        arr = self.repeats.get(key)
        if arr is None:
            if len(self.repeats) >= _REPEATS:
                self.repeats.clear()
            arr = pa.repeat(values[int(idx[0])], n)
            self.repeats[key] = arr
        return arr

    def offsets(self, n_lanes: int, per_lane: int) -> pa.Array:
        """int32 list offsets ``0, per_lane, 2*per_lane, ...`` (cached)."""
        key = (n_lanes, per_lane)
        arr = self.list_offsets.get(key)
        if arr is None:
            arr = pa.array(np.arange(n_lanes + 1, dtype=np.int32) * np.int32(per_lane))
            self.list_offsets[key] = arr
        return arr


_TABLES: weakref.WeakKeyDictionary[PlanContext, PlanTables] = weakref.WeakKeyDictionary()


def plan_tables(plan: PlanContext) -> PlanTables:
    """The lookup tables of ``plan`` (computed on first use, then shared by every stream)."""
    tables = _TABLES.get(plan)
    if tables is None:
        streams = plan.streams
        base = streams.stream_base
        protocols = streams.protocols
        tables = PlanTables(
            stream_base=base, n_rows=streams.n_rows.astype(_I64),
            piece_ptr=streams.piece_ptr,
            piece_mrid=np.asarray(streams.piece_manifest_row_id, dtype=_I64),
            piece_path=pa.array([*streams.piece_path, ""], type=pa.string()),
            protocol=pa.array(list(protocols), type=pa.string()),
            group_key=pa.array(list(plan.group_key_json), type=pa.string()),
            alignment_key=pa.array(list(plan.alignment_key_json), type=pa.string()),
            input_columns=tuple(plan.config.input_columns(p) for p in protocols),
            target_columns=tuple(plan.config.target_columns(p) for p in protocols),
        )
        _TABLES[plan] = tables
    return tables


def _child(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    flat = values.reshape(-1)
    return pa.Array.from_buffers(typ, flat.shape[0], [None, pa.py_buffer(flat)])


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
        storage: Storage,
        cache: ChunkCache,
        schema: pa.Schema,
        *,
        on_bad_segment: BadSegmentPolicy = "raise",
    ) -> None:
        self.plan = plan
        self.storage = storage
        self.cache = cache
        self.schema = schema
        self.on_bad_segment = on_bad_segment
        self.bad_paths: dict[str, str] = {}
        self.tables = plan_tables(plan)
        self._requests: dict[int, ChunkRequest] = {}
        self._pool = _BufferPool()
        self._prov: dict[int, tuple[pa.RecordBatch, int, int]] = {}
        self._prov_schema = pa.schema(list(schema)[3:])

    # -- planning ---------------------------------------------------------------------

    def lane_plan(self, schedule: Schedule, g: int) -> LanePlan:
        """The (lane, chunk) ranges of global batch ``g`` (vectorized)."""
        return self.lane_plans(schedule, np.asarray([g], dtype=_I64))[0]

    def lane_plans(self, schedule: Schedule, gs: np.ndarray) -> list[LanePlan]:
        """The lane plans of global batches ``gs``, computed together (one pass of numpy)."""
        plan, tables = self.plan, self.tables
        gs = np.asarray(gs, dtype=_I64)
        lo = schedule.batch_lane_ptr[gs].astype(_I64)
        counts = schedule.batch_lane_ptr[gs + 1].astype(_I64) - lo
        bptr = np.concatenate([[0], np.cumsum(counts)]).astype(_I64)
        idx = np.arange(int(bptr[-1]), dtype=_I64) + np.repeat(lo - bptr[:-1], counts)
        seq = schedule.batch_seq_len[gs].astype(_I64)
        s = schedule.lane_stream[idx].astype(_I64, copy=False)
        off = schedule.lane_offset[idx].astype(_I64, copy=False)
        lane_protocol = schedule.lane_protocol[idx]
        real = np.flatnonzero(off >= 0)
        t = np.repeat(seq, counts)[real]
        base = tables.stream_base[s[real]]
        start = base + off[real]
        stop = base + np.minimum(off[real] + t + 1, tables.n_rows[s[real]])
        owner, chunk, r_lo, r_hi = split_ranges(plan.chunk_gstart, plan.chunk_len, start, stop)
        c_lo = plan.chunk_gstart[chunk]
        ok = r_hi > r_lo
        if not ok.all():
            owner, chunk, r_lo, r_hi, c_lo = owner[ok], chunk[ok], r_lo[ok], r_hi[ok], c_lo[ok]
        rng_lane = real[owner]
        rng_src, rng_win, rng_len = r_lo - c_lo, r_lo - start[owner], r_hi - r_lo
        cut = np.searchsorted(rng_lane, bptr).tolist()
        lane_t = np.repeat(seq, counts)
        lane_bad = np.concatenate([[0], np.cumsum(
            (off < 0) | (tables.n_rows[s] - off < lane_t + 1))]).tolist()
        rng_t = lane_t[rng_lane]
        step = ((chunk[1:] == chunk[:-1]) & (rng_src[1:] == rng_src[:-1] + rng_t[:-1])
                & (rng_lane[1:] == rng_lane[:-1] + 1))
        rng_bad = np.concatenate([[0], np.cumsum(
            (rng_win != 0) | (rng_len != rng_t + 1))]).tolist()
        step_bad = np.concatenate([[0], np.cumsum(~step)]).tolist()
        src_list = rng_src.tolist()
        chunk_list = chunk.tolist()
        keys = plan.chunk_keys
        all_keys = [keys[c] for c in chunk_list]
        protocols = schedule.batch_protocol[gs].tolist()
        out: list[LanePlan] = []
        for j, g in enumerate(gs.tolist()):
            l0, l1, a, b = int(bptr[j]), int(bptr[j + 1]), cut[j], cut[j + 1]
            tiled = (b > a and b - a == l1 - l0 and lane_bad[l1] == lane_bad[l0]
                     and rng_bad[b] == rng_bad[a] and step_bad[b - 1] == step_bad[a])
            out.append(LanePlan(
                global_batch=g, protocol=protocols[j], lane_lo=int(lo[j]),
                n_lanes=l1 - l0, seq_len=int(seq[j]), lane_stream=s[l0:l1],
                lane_offset=off[l0:l1], lane_protocol=lane_protocol[l0:l1],
                rng_lane=rng_lane[a:b] - l0, rng_chunk=chunk[a:b], rng_src=rng_src[a:b],
                rng_win=rng_win[a:b], rng_len=rng_len[a:b], keys=all_keys[a:b],
                chunks=tuple(dict.fromkeys(chunk_list[a:b])),
                tiled_src=src_list[a] if tiled else -1,
            ))
        return out

    def _request(self, c: int) -> ChunkRequest:
        req = self._requests.get(c)
        if req is None:
            plan = self.plan
            spec = plan.specs[int(plan.chunk_spec[c])]
            info = plan.piece_info(int(plan.chunk_piece[c]))
            req = ChunkRequest(
                key=plan.chunk_keys[c], nbytes=spec.nbytes(int(plan.chunk_len[c])),
                load=chunk_loader(self.storage, info, int(plan.chunk_index[c]), spec),
            )
            self._requests[c] = req
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
        lp = lp if lp is not None else self.lane_plan(schedule, g)
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
        return self._record_batch(schedule, lp, arrays, skipped, batch_idx)

    def _skipped_by_known_bad(self, lp: LanePlan) -> dict[int, tuple[str, str]]:
        if not self.bad_paths:
            return {}
        out: dict[int, tuple[str, str]] = {}
        for i, key in enumerate(lp.keys):
            if key.path in self.bad_paths:
                out.setdefault(int(lp.rng_lane[i]), (key.path, self.bad_paths[key.path]))
        return out

    def _copy(self, lp: LanePlan, pins: Any,
              skipped: dict[int, tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tables = self.tables
        c_in = len(tables.input_columns[lp.protocol])
        c_out = len(tables.target_columns[lp.protocol])
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
        for b in np.flatnonzero(n_in < t).tolist():
            inputs[b, int(n_in[b]):] = INPUT_PAD
        for b in np.flatnonzero(n_tg < t).tolist():
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
        and numpy overhead of these 11 columns is paid once per block.
        """
        gs = np.asarray(gs, dtype=_I64)
        if not gs.shape[0]:
            return
        lo = schedule.batch_lane_ptr[gs].astype(_I64)
        counts = schedule.batch_lane_ptr[gs + 1].astype(_I64) - lo
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(_I64)
        idx = np.arange(int(ptr[-1]), dtype=_I64) + np.repeat(lo - ptr[:-1], counts)
        prov = self._provenance(
            schedule.lane_stream[idx].astype(_I64, copy=False),
            schedule.lane_offset[idx].astype(_I64, copy=False),
            schedule.lane_protocol[idx],
            np.repeat(schedule.batch_seq_len[gs].astype(_I64), counts),
        )
        if len(self._prov) > 4 * BLOCK_BATCHES:
            self._prov.clear()
        for k, g in enumerate(gs.tolist()):
            self._prov[g] = (prov, int(ptr[k]), int(counts[k]))

    def _provenance(self, lane_stream: np.ndarray, offsets: np.ndarray,
                    lane_protocol: np.ndarray, seq_len: np.ndarray) -> pa.RecordBatch:
        """The provenance columns (``COLUMNS[3:]``) of the given lanes."""
        tables = self.tables
        n = int(lane_stream.shape[0])
        refs = lane_segment_refs(self.plan.streams, lane_stream, offsets, seq_len)
        n_pieces = int(tables.piece_mrid.shape[0])
        first_ref = np.full(n, -1, dtype=_I64)
        lanes_with, idx = np.unique(refs.lane, return_index=True)
        first_ref[lanes_with] = idx
        fallback = tables.piece_ptr[lane_stream]
        first_piece = (np.where(first_ref >= 0, refs.piece[np.maximum(first_ref, 0)], fallback)
                       if refs.piece.shape[0] else fallback)
        first_piece = np.minimum(first_piece, max(n_pieces - 1, 0))
        mrid = tables.piece_mrid[first_piece] if n_pieces else np.zeros(n, _I64)
        seg_off = pa.array(np.concatenate(
            [[0], np.cumsum(np.bincount(refs.lane, minlength=n))]).astype(np.int32))

        def seg_list(values: Any) -> pa.Array:
            return pa.ListArray.from_arrays(seg_off, values)

        row_count = pa.array(refs.row_count)
        columns = [
            tables.take("protocol", lane_protocol),
            pa.array(mrid),
            tables.take("piece_path", np.where(first_ref >= 0, first_piece, n_pieces)),
            pa.array(offsets),
            tables.take("group_key", lane_stream),
            tables.take("alignment_key", lane_stream),
            seg_list(tables.take("piece_path", refs.piece)),
            seg_list(pa.array(refs.row_start)),
            seg_list(row_count),
            seg_list(pa.array(refs.window_row_start)),
            seg_list(row_count),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self._prov_schema)

    def _record_batch(
        self, schedule: Schedule, lp: LanePlan,
        arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
        skipped: dict[int, tuple[str, str]], batch_idx: int,
    ) -> tuple[pa.RecordBatch, BatchMetadata]:
        tables = self.tables
        inputs, targets, mask = arrays
        n, t = lp.n_lanes, lp.seq_len
        c_in, c_out = inputs.shape[2], targets.shape[2]
        g = lp.global_batch
        cached = self._prov.pop(g, None)
        if cached is not None and not skipped:
            block, row, count = cached
            prov = block.slice(row, count) if count != block.num_rows else block
        else:
            offsets = lp.lane_offset
            if skipped:
                offsets = offsets.copy()
                offsets[list(skipped)] = -1
            prov = self._provenance(lp.lane_stream, offsets, lp.lane_protocol,
                                    np.full(n, t, dtype=_I64))
        columns = [
            pa.ListArray.from_arrays(tables.offsets(n, t * c_in), _child(inputs, pa.float32())),
            pa.ListArray.from_arrays(tables.offsets(n, t * c_out),
                                     _child(targets, pa.float32())),
            pa.ListArray.from_arrays(tables.offsets(n, t), _child(mask, pa.uint8())),
            *prov.columns,
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        group = int(schedule.batch_group[g])
        code = int(schedule.batch_protocol[g])
        meta = BatchMetadata(
            batch_idx=batch_idx, global_batch=g, split=self.plan.config.split, seq_len=t,
            c_in=c_in, c_out=c_out,
            input_columns=tables.input_columns[code],
            target_columns=tables.target_columns[code],
            stateful_group_idx=group if group >= 0 else None,
            stateful_step_idx=int(schedule.batch_step[g]) if group >= 0 else None,
            stateful_steps=int(schedule.batch_steps[g]) if group >= 0 else None,
            skipped_lanes=tuple(
                {"lane": b, "path": path, "error": err}
                for b, (path, err) in sorted(skipped.items())
            ),
        )
        return batch, meta


def chunk_loader(storage: Storage, info: Any, chunk_idx: int,
                 spec: Any) -> Callable[[], tuple[ChunkMatrices, int]]:
    """A zero-argument loader of one chunk (what the cache calls on a miss)."""
    def load() -> tuple[ChunkMatrices, int]:
        return load_chunk(storage, info, chunk_idx, spec)

    return load
