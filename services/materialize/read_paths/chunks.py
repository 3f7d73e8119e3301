"""The chunk path: a batch copied from the chunks its (lane, chunk) ranges read.

The distinct chunks of a batch (its working set) are pinned at once; lanes that lie
inside one chunk (all but ~T/chunk_rows of them) are gathered per chunk with one
strided ``np.take`` per matrix; only lanes that straddle chunks or end early take a
slice loop; a batch whose lanes are back-to-back full windows of one chunk
(sequential plans) is one contiguous copy per matrix. The outgoing arrays come from
the stream's :class:`~services.materialize.read_paths.base.BufferPool`.

A segment that cannot be read fails the batch, or, under ``on_bad_segment="skip"``,
is remembered and the lanes that read it are padding (``LaneArrays.skipped``) in this
and every later batch of the stream.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from services.contract.errors import ErrorType, WindpipeError
from services.contract.wire import INPUT_PAD
from services.materialize.cache import ChunkCache, ChunkRequest
from services.materialize.chunks import ChunkMatrices, load_chunk
from services.materialize.lanes import LanePlan
from services.materialize.plan import PlanContext
from services.materialize.plan_tables import PlanTables
from services.materialize.read_paths.base import BufferPool, LaneArrays, Skipped
from services.storage.store import Storage

__all__ = ["BadSegmentPolicy", "ChunkPath", "chunk_request", "plan_chunk_requests"]

BadSegmentPolicy = Literal["raise", "skip"]
_I64 = np.int64


class ChunkPath:
    """Reads every batch from its chunks (the path of splits too large to hold whole)."""

    def __init__(self, plan: PlanContext, tables: PlanTables, cache: ChunkCache,
                 pool: BufferPool, *, storage: Storage | None,
                 on_bad_segment: BadSegmentPolicy) -> None:
        self.plan = plan
        self.cache = cache
        self.on_bad_segment = on_bad_segment
        self.bad_paths: dict[str, str] = {}  # segment path -> error, under "skip"
        self._tables = tables
        self._pool = pool
        self._storage = storage
        self._requests: dict[int, ChunkRequest] = {}

    def requests(self, lp: LanePlan, *,
                 skip_lanes: set[int] | None = None) -> list[ChunkRequest]:
        """The chunk loads of a lane plan (lanes in ``skip_lanes`` left out)."""
        if not skip_lanes:
            return [self._request(c) for c in lp.chunks]
        keep = ~np.isin(lp.rng_lane, np.fromiter(skip_lanes, dtype=_I64))
        return [self._request(c) for c in dict.fromkeys(lp.rng_chunk[keep].tolist())]

    def read(self, lp: LanePlan, requests: list[ChunkRequest]) -> LaneArrays:
        """``lp``'s lanes from its pinned chunks; lanes of known bad segments (and, under
        ``"skip"``, of any that fails now) left out as padding."""
        skipped = self._skipped_by_known_bad(lp)
        if skipped:
            requests = self.requests(lp, skip_lanes=set(skipped))
        while True:
            try:
                pins = self.cache.acquire(requests)
                break
            except WindpipeError as exc:
                path = exc.details.get("path")
                if (self.on_bad_segment != "skip" or exc.type != ErrorType.SEGMENT_ERROR
                        or not path or path in self.bad_paths):
                    raise
                self.bad_paths[str(path)] = exc.message
                skipped = self._skipped_by_known_bad(lp)
                requests = self.requests(lp, skip_lanes=set(skipped))
        with pins:
            inputs, targets, mask = self._copy(lp, pins, skipped)
        return LaneArrays(inputs, targets, mask, skipped)

    def _request(self, c: int) -> ChunkRequest:
        req = self._requests.get(c)
        if req is None:
            if self._storage is None:  # a block-only reader never gets here
                raise WindpipeError(ErrorType.INTERNAL,
                                    "this batch builder reads blocks only (no storage)")
            req = self._requests[c] = chunk_request(self.plan, self._storage, c)
        return req

    def _skipped_by_known_bad(self, lp: LanePlan) -> Skipped:
        if not self.bad_paths:
            return {}
        out: Skipped = {}
        for i, key in enumerate(lp.keys):
            if key.path in self.bad_paths:
                out.setdefault(int(lp.rng_lane[i]), (key.path, self.bad_paths[key.path]))
        return out

    def _copy(self, lp: LanePlan, pins: Any,
              skipped: Skipped) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tables = self._tables
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
            _gather_full(lp, matrices, full, inputs, targets)
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
