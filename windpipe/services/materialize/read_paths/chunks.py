"""The chunk path: a batch copied from the chunks its (lane, chunk) ranges read.

The distinct chunks of a batch (its working set) are pinned at once; lanes that lie
inside one chunk (all but ~T/chunk_rows of them) are gathered per chunk with one
fancy index of whole windows (:func:`~services.materialize.rows.window_views`); only
lanes that straddle chunks or end early take a slice loop (one contiguous copy of rows
per range); a batch whose lanes are back-to-back full windows of one chunk
(sequential plans) is one strided copy. The outgoing window block comes from
the stream's :class:`~services.materialize.read_paths.base.BufferPool`.

A segment that cannot be read fails the batch, or, under ``on_bad_segment="skip"``,
is remembered and the lanes that read it are padding (``LaneArrays.skipped``) in this
and every later batch of the stream.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from windpipe.services.contract.errors import ErrorType, InternalError, WindpipeError
from windpipe.services.materialize.cache import ChunkCache, ChunkRequest
from windpipe.services.materialize.chunks import ChunkMatrices, load_chunk
from windpipe.services.materialize.lanes import LanePlan
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.materialize.read_paths.base import BufferPool, LaneArrays, Skipped
from windpipe.services.materialize.rows import pad_row, window_views
from windpipe.services.storage.store import Storage

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
            windows, mask = self._copy(lp, pins, skipped)
        return LaneArrays(windows, mask, skipped)

    def _request(self, c: int) -> ChunkRequest:
        req = self._requests.get(c)
        if req is None:
            if self._storage is None:  # a block-only reader never gets here
                raise InternalError("this batch builder reads blocks only (no storage)")
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

    def _copy(self, lp: LanePlan, pins: Any, skipped: Skipped) -> tuple[np.ndarray, np.ndarray]:
        tables = self._tables
        spec = self.plan.specs[lp.protocol]
        c_in, c_out = len(spec.input_columns), len(spec.target_columns)
        n, t = lp.n_lanes, lp.seq_len
        windows, mask = self._pool.take(n, t, c_in + c_out)
        if lp.tiled_src >= 0 and not skipped:
            m = pins[self.plan.chunk_keys[lp.chunks[0]]]
            np.copyto(windows, _tiled(m.rows, lp.tiled_src, n, t))
            mask.fill(1)
            return windows, mask
        off = lp.lane_offset
        avail = np.where(off >= 0, tables.n_rows[lp.lane_stream] - off, 0)
        if skipped:
            avail[list(skipped)] = 0
        mask.fill(1)
        pad = pad_row(c_in, c_out, input_fill=spec.input_fill)
        empty = np.flatnonzero(avail <= 0)  # padding lanes: at once
        if empty.shape[0]:
            windows[empty] = pad
            mask[empty] = 0
        for b in np.flatnonzero((avail < t + 1) & (avail > 0)).tolist():
            windows[b, int(avail[b]):] = pad
            mask[b, max(int(avail[b]) - 1, 0):] = 0
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
            _gather_full(lp, matrices, full, windows)
        rest = np.flatnonzero(~full if live is None else ~full & live)
        if rest.shape[0]:
            chunk = lp.rng_chunk
            for i in rest.tolist():
                m = matrices[int(chunk[i])]
                b, s0, w, k = int(lanes[i]), int(src[i]), int(win[i]), int(cnt[i])
                windows[b, w : w + k] = m.rows[s0 : s0 + k]
        return windows, mask


def _tiled(rows: np.ndarray, s0: int, n: int, t: int) -> np.ndarray:
    """The ``n`` windows of ``T + 1`` rows back to back in ``rows`` from row ``s0`` (window
    ``b`` starts at ``s0 + b * T``; each shares its last row with the next): a view."""
    step = rows.strides[0]
    return np.ndarray((n, t + 1, rows.shape[1]), dtype=rows.dtype, buffer=rows,
                      offset=s0 * step, strides=(t * step, step, rows.strides[1]))


def _gather_full(lp: LanePlan, matrices: dict[int, ChunkMatrices], full: np.ndarray,
                 windows: np.ndarray) -> None:
    """Lanes whose window (and target row) lie inside one chunk: one take per chunk."""
    t = lp.seq_len
    chunk = lp.rng_chunk
    one_chunk = len(lp.chunks) == 1
    for c in lp.chunks:
        sel = full if one_chunk else full & (chunk == c)
        idx = np.flatnonzero(sel)
        if not idx.shape[0]:
            continue
        rows = matrices[c].rows
        lanes, src = lp.rng_lane[idx], lp.rng_src[idx]
        contiguous = int(lanes[-1]) - int(lanes[0]) + 1 == lanes.shape[0] and bool(
            (np.diff(lanes) == 1).all())
        n = lanes.shape[0]
        if contiguous and (n == 1 or bool((np.diff(src) == t).all())):
            # windows back to back in the chunk: one strided copy
            windows[lanes[0] : lanes[0] + n] = _tiled(rows, int(src[0]), n, t)
        elif contiguous:
            windows[lanes[0] : lanes[-1] + 1] = window_views(rows, t)[src]
        else:
            windows[lanes] = window_views(rows, t)[src]


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
