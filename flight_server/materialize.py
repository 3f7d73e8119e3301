"""One training batch: slice copies from cached chunk matrices into fresh outgoing buffers.

For batch ``g`` of an epoch's schedule, :class:`BatchBuilder` finds (vectorized)
every ``(lane, chunk)`` row range the lanes read, pins those chunks in the shared
cache for the duration of the copy, copies each range with one slice assignment
per matrix, fills the padding, and wraps the buffers zero-copy as the Arrow list
columns of ``contract.wire``. There is no per-row Python: loops run over lanes and
ranges only. Pins are released before the batch is handed to Flight, so a client
that goes away can never leave chunks pinned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from catalog.schedule import Schedule, lane_segment_refs
from catalog.storage import Storage
from contract.errors import ErrorType, WindpipeError
from contract.wire import INPUT_PAD, BatchMetadata
from flight_server.cache import ChunkCache, ChunkRequest
from flight_server.chunks import ChunkKey, ChunkMatrices, load_chunk
from flight_server.plans import PlanContext

__all__ = ["BadSegmentPolicy", "BatchBuilder", "LanePlan", "chunk_loader"]

BadSegmentPolicy = Literal["raise", "skip"]
_I64 = np.int64


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


def _expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    owner = np.repeat(np.arange(counts.shape[0], dtype=_I64), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(_I64)
    return owner, np.arange(owner.shape[0], dtype=_I64) - starts[owner]


def _list_array(values: np.ndarray, n_lanes: int, per_lane: int, typ: pa.DataType) -> pa.Array:
    flat = values.reshape(-1)
    child = pa.Array.from_buffers(typ, flat.shape[0], [None, pa.py_buffer(flat)])
    offsets = pa.array(np.arange(n_lanes + 1, dtype=np.int32) * np.int32(per_lane))
    return pa.ListArray.from_arrays(offsets, child)


class BatchBuilder:
    """Materializes batches of one plan through the shared cache."""

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

    # -- planning ---------------------------------------------------------------------

    def lane_plan(self, schedule: Schedule, g: int) -> LanePlan:
        """The (lane, chunk) ranges of global batch ``g`` (vectorized)."""
        plan, streams = self.plan, self.plan.streams
        lo, hi = int(schedule.batch_lane_ptr[g]), int(schedule.batch_lane_ptr[g + 1])
        t = int(schedule.batch_seq_len[g])
        s = schedule.lane_stream[lo:hi].astype(_I64)
        off = schedule.lane_offset[lo:hi].astype(_I64)
        real = np.flatnonzero(off >= 0)
        base = streams.stream_base
        start = base[s[real]] + off[real]
        stop = base[s[real]] + np.minimum(off[real] + t + 1, streams.n_rows[s[real]])
        gs = plan.chunk_gstart
        first = np.searchsorted(gs, start, side="right") - 1
        last = np.searchsorted(gs, stop - 1, side="right") - 1
        owner, k = _expand(np.maximum(last - first + 1, 0))
        chunk = first[owner] + k
        c_lo = gs[chunk]
        r_lo = np.maximum(start[owner], c_lo)
        r_hi = np.minimum(stop[owner], c_lo + plan.chunk_len[chunk])
        ok = r_hi > r_lo
        owner, chunk, r_lo, r_hi, c_lo = owner[ok], chunk[ok], r_lo[ok], r_hi[ok], c_lo[ok]
        lp = LanePlan(
            global_batch=g, protocol=int(schedule.batch_protocol[g]), lane_lo=lo,
            n_lanes=hi - lo, seq_len=t, lane_stream=s,
            lane_offset=off, lane_protocol=schedule.lane_protocol[lo:hi],
            rng_lane=real[owner], rng_chunk=chunk, rng_src=r_lo - c_lo,
            rng_win=r_lo - start[owner], rng_len=r_hi - r_lo,
        )
        keys = plan.chunk_keys
        lp.keys.extend(keys[c] for c in chunk.tolist())
        return lp

    def requests(self, lp: LanePlan, *, skip_lanes: set[int] | None = None) -> list[ChunkRequest]:
        """The chunk loads of a lane plan (lanes in ``skip_lanes`` left out)."""
        plan = self.plan
        out: dict[ChunkKey, ChunkRequest] = {}
        for i, key in enumerate(lp.keys):
            if key in out or (skip_lanes and int(lp.rng_lane[i]) in skip_lanes):
                continue
            c = int(lp.rng_chunk[i])
            spec = plan.specs[int(plan.chunk_spec[c])]
            info = plan.piece_info(int(plan.chunk_piece[c]))
            out[key] = ChunkRequest(
                key=key, nbytes=spec.nbytes(int(plan.chunk_len[c])),
                load=chunk_loader(self.storage, info, int(plan.chunk_index[c]), spec),
            )
        return list(out.values())

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
        plan = self.plan
        protocol = plan.streams.protocols[lp.protocol]
        c_in = len(plan.config.input_columns(protocol))
        c_out = len(plan.config.target_columns(protocol))
        n, t = lp.n_lanes, lp.seq_len
        inputs = np.empty((n, t, c_in), dtype=np.float32)
        targets = np.empty((n, t, c_out), dtype=np.float32)
        mask = np.zeros((n, t), dtype=np.uint8)
        n_rows = plan.streams.n_rows
        avails = (n_rows[lp.lane_stream] - lp.lane_offset).tolist()
        for b, o in enumerate(lp.lane_offset.tolist()):
            if o < 0 or b in skipped:
                inputs[b] = INPUT_PAD
                targets[b] = np.nan
                continue
            avail = avails[b]
            n_in, n_tg = min(t, avail), max(0, min(t, avail - 1))
            if n_in < t:
                inputs[b, n_in:] = INPUT_PAD
            if n_tg < t:
                targets[b, n_tg:] = np.nan
            mask[b, :n_tg] = 1
        ranges = zip(lp.keys, lp.rng_lane.tolist(), lp.rng_src.tolist(), lp.rng_win.tolist(),
                     lp.rng_len.tolist(), strict=True)
        for key, b, src, w, cnt in ranges:
            if b in skipped:
                continue
            m: ChunkMatrices = pins[key]
            i_hi = min(w + cnt, t)
            if w < i_hi:
                inputs[b, w:i_hi] = m.inputs[src : src + i_hi - w]
            t_lo = max(w, 1)
            if t_lo < w + cnt:
                targets[b, t_lo - 1 : w + cnt - 1] = m.targets[src + t_lo - w : src + cnt]
        return inputs, targets, mask

    def _record_batch(
        self, schedule: Schedule, lp: LanePlan,
        arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
        skipped: dict[int, tuple[str, str]], batch_idx: int,
    ) -> tuple[pa.RecordBatch, BatchMetadata]:
        plan, streams = self.plan, self.plan.streams
        inputs, targets, mask = arrays
        n, t = lp.n_lanes, lp.seq_len
        c_in, c_out = inputs.shape[2], targets.shape[2]
        offsets = lp.lane_offset.copy()
        if skipped:
            offsets[list(skipped)] = -1
        refs = lane_segment_refs(streams, lp.lane_stream, offsets, t)
        first_ref = np.full(n, -1, dtype=_I64)
        lanes_with, idx = np.unique(refs.lane, return_index=True)
        first_ref[lanes_with] = idx
        fallback = streams.piece_ptr[lp.lane_stream]
        first_piece = (np.where(first_ref >= 0, refs.piece[np.maximum(first_ref, 0)], fallback)
                       if refs.piece.shape[0] else fallback)
        first_piece = np.minimum(first_piece, max(len(streams.piece_path) - 1, 0))
        paths = streams.piece_path
        manifest_path = [paths[int(p)] if r >= 0 else "" for p, r in
                         zip(first_piece.tolist(), first_ref.tolist(), strict=True)]
        mrid = streams.piece_manifest_row_id[first_piece] if len(paths) else np.zeros(n, _I64)
        seg_off = pa.array(np.concatenate(
            [[0], np.cumsum(np.bincount(refs.lane, minlength=n))]).astype(np.int32))

        def seg_list(values: Any, typ: pa.DataType) -> pa.Array:
            return pa.ListArray.from_arrays(seg_off, pa.array(values, type=typ))

        s_list = lp.lane_stream.tolist()
        columns = [
            _list_array(inputs, n, t * c_in, pa.float32()),
            _list_array(targets, n, t * c_out, pa.float32()),
            _list_array(mask, n, t, pa.uint8()),
            pa.array([streams.protocols[int(p)] for p in lp.lane_protocol.tolist()],
                     type=pa.string()),
            pa.array(np.asarray(mrid, dtype=_I64)),
            pa.array(manifest_path, type=pa.string()),
            pa.array(offsets),
            pa.array([plan.group_key_json[s] for s in s_list], type=pa.string()),
            pa.array([plan.alignment_key_json[s] for s in s_list], type=pa.string()),
            seg_list([paths[int(p)] for p in refs.piece.tolist()], pa.string()),
            seg_list(refs.row_start, pa.int64()),
            seg_list(refs.row_count, pa.int64()),
            seg_list(refs.window_row_start, pa.int64()),
            seg_list(refs.row_count, pa.int64()),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        g = lp.global_batch
        group = int(schedule.batch_group[g])
        protocol = streams.protocols[int(schedule.batch_protocol[g])]
        meta = BatchMetadata(
            batch_idx=batch_idx, global_batch=g, split=plan.config.split, seq_len=t,
            c_in=c_in, c_out=c_out,
            input_columns=plan.config.input_columns(protocol),
            target_columns=plan.config.target_columns(protocol),
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
    def load() -> tuple[ChunkMatrices, int]:
        return load_chunk(storage, info, chunk_idx, spec)

    return load
