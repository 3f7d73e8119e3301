"""Which segment rows a set of lanes reads: row ranges cut at piece boundaries.

The provenance of a batch (SEMANTICS section 8), computed by the materializer and
the tests. Vectorized: one ``searchsorted`` per call, no per-lane Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windpipe.services.planning.arrays import split_ranges
from windpipe.services.planning.streams import Streams

__all__ = ["SegmentRefs", "lane_segment_refs"]

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
