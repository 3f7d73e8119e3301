"""Where each lane of a batch reads: (lane, chunk) row ranges of the plan's chunk table.

A lane reads rows ``[o, min(o+T+1, N))`` of its stream (T inputs and the target
row). :func:`lane_plans` cuts those ranges at chunk boundaries for a block of
batches in one pass of numpy and notes, per batch, whether its lanes are back-to-back
full windows of one chunk (then the batch is one contiguous copy per matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from windpipe.services.materialize.chunks import ChunkKey
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.planning.arrays import split_ranges
from windpipe.services.planning.schedule import Schedule

__all__ = ["LanePlan", "block_lanes", "lane_plans"]

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
    lane_key: np.ndarray | None = None  # aligned plans: each lane's key
    keys: list[ChunkKey] = field(default_factory=list)  # per range
    chunks: tuple[int, ...] = ()  # distinct chunks, in first-use order
    # >= 0 when every lane is a full window (T inputs + the target row) of ONE chunk and
    # lane b starts at row tiled_src + b*T: the batch is one contiguous copy per matrix
    tiled_src: int = -1


def block_lanes(
    schedule: Schedule, gs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lanes of global batches ``gs`` laid end to end: ``(lo, counts, ptr, idx)``.

    Batch ``gs[j]`` has ``counts[j]`` lanes starting at schedule lane ``lo[j]``; they sit
    at ``ptr[j]:ptr[j+1]`` of the block, and ``idx`` maps block lanes to schedule lanes.
    """
    lo = schedule.batch_lane_ptr[gs].astype(_I64)
    counts = schedule.batch_lane_ptr[gs + 1].astype(_I64) - lo
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(_I64)
    idx = np.arange(int(ptr[-1]), dtype=_I64) + np.repeat(lo - ptr[:-1], counts)
    return lo, counts, ptr, idx


def lane_plans(
    plan: PlanContext, tables: PlanTables, schedule: Schedule, gs: np.ndarray
) -> list[LanePlan]:
    """The lane plans of global batches ``gs``, computed together (one pass of numpy)."""
    gs = np.asarray(gs, dtype=_I64)
    lo, counts, bptr, idx = block_lanes(schedule, gs)
    seq = schedule.batch_seq_len[gs].astype(_I64)
    s = schedule.lane_stream[idx].astype(_I64, copy=False)
    off = schedule.lane_offset[idx].astype(_I64, copy=False)
    lane_protocol = schedule.lane_protocol[idx]
    lane_key = schedule.lane_key[idx] if schedule.lane_key is not None else None
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
            rng_win=rng_win[a:b], rng_len=rng_len[a:b],
            lane_key=lane_key[l0:l1] if lane_key is not None else None, keys=all_keys[a:b],
            chunks=tuple(dict.fromkeys(chunk_list[a:b])),
            tiled_src=src_list[a] if tiled else -1,
        ))
    return out
