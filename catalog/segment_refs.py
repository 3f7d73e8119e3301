"""Which segment rows a set of lanes reads: row ranges cut at piece or chunk boundaries.

Shared by the plan report (cache working-set bounds), the Flight server (provenance
columns, chunk gathers) and the tests. Vectorized: one ``searchsorted`` per call, no
per-lane Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catalog.streams import Streams

__all__ = ["SegmentRefs", "expand_counts", "lane_segment_refs", "split_ranges"]

_I64 = np.int64


@dataclass(frozen=True, eq=False)
class SegmentRefs:
    """Segment ranges read by a set of lanes, in lane then stream order.

    ``lane`` indexes the lanes passed in; ``piece`` indexes ``Streams.piece_*``;
    ``row_start``/``row_count`` are within the piece (the extra target row
    included); ``window_row_start`` is counted from the lane's first input row.
    """

    lane: np.ndarray
    piece: np.ndarray
    row_start: np.ndarray
    row_count: np.ndarray
    window_row_start: np.ndarray

    @property
    def window_row_count(self) -> np.ndarray:
        """Rows of the range inside the lane's window (equal to ``row_count``)."""
        return self.row_count


def expand_counts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(owner, position)`` for ``counts[i]`` items owned by each ``i``."""
    counts = counts.astype(_I64, copy=False)
    owner = np.repeat(np.arange(counts.shape[0], dtype=_I64), counts)
    starts = np.cumsum(counts) - counts
    return owner, np.arange(owner.shape[0], dtype=_I64) - starts[owner]


def split_ranges(
    part_start: np.ndarray, part_len: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut row ranges ``[lo, hi)`` at the boundaries of consecutive parts.

    ``part_start`` (sorted) and ``part_len`` describe parts (pieces, chunks) of one
    row space. Returns ``(owner, part, r_lo, r_hi)``, one entry per (range, part)
    overlap candidate in range then part order; entries with ``r_hi <= r_lo`` (empty
    parts) are the caller's to drop. Ranges inside one part, the common case, take a
    fast path with no expansion.
    """
    first = np.searchsorted(part_start, lo, side="right") - 1
    last = np.searchsorted(part_start, hi - 1, side="right") - 1
    counts = np.maximum(last - first + 1, 0)
    if counts.shape[0] and bool((counts == 1).all()):
        owner, part = np.arange(lo.shape[0], dtype=_I64), first
    else:
        owner, k = expand_counts(counts)
        part = first[owner] + k
    p_lo = part_start[part]
    return owner, part, np.maximum(lo[owner], p_lo), np.minimum(hi[owner], p_lo + part_len[part])


def lane_segment_refs(
    streams: Streams, lane_stream: np.ndarray, lane_offset: np.ndarray,
    seq_len: int | np.ndarray,
) -> SegmentRefs:
    """The piece ranges each real lane reads: rows ``[o, min(o+T+1, N))`` of its stream.

    One entry per (lane, piece) range, in lane then stream order; padding lanes
    (offset -1) give none; empty pieces are skipped.
    """
    lane_stream = np.asarray(lane_stream, dtype=_I64)
    lane_offset = np.asarray(lane_offset, dtype=_I64)
    t = np.broadcast_to(np.asarray(seq_len, dtype=_I64), lane_offset.shape)
    lanes = np.flatnonzero(lane_offset >= 0)
    s = lane_stream[lanes]
    base = streams.stream_base
    lo = base[s] + lane_offset[lanes]
    hi = base[s] + np.minimum(lane_offset[lanes] + t[lanes] + 1, streams.n_rows[s])
    owner, piece, r_lo, r_hi = split_ranges(
        streams.piece_global_start, streams.piece_rows, lo, hi
    )
    p_lo = streams.piece_global_start[piece]
    ok = r_hi > r_lo
    return SegmentRefs(
        lane=lanes[owner][ok],
        piece=piece[ok],
        row_start=(r_lo - p_lo)[ok],
        row_count=(r_hi - r_lo)[ok],
        window_row_start=(r_lo - lo[owner])[ok],
    )
