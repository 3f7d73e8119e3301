"""The lane-aligned provenance columns of a batch (wire ``COLUMNS[3:]``, SEMANTICS section 8).

Built for blocks of batches at once by :class:`windpipe.services.materialize.builder.BatchBuilder`
(each batch then takes a zero-copy slice), so the per-batch Arrow overhead of these
columns is paid once per block.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from windpipe.services.arrow_values import from_numpy
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.planning.segment_refs import lane_segment_refs

__all__ = ["provenance_batch"]

_I64 = np.int64


def provenance_batch(
    plan: PlanContext, tables: PlanTables, schema: pa.Schema, *, lane_stream: np.ndarray,
    offsets: np.ndarray, lane_protocol: np.ndarray, seq_len: np.ndarray,
    lane_key: np.ndarray | None = None,
) -> pa.RecordBatch:
    """The provenance columns (``schema``: ``COLUMNS[3:]`` of the wire) of the given lanes.

    Padding lanes (offset -1) have no segment ranges; their manifest row is the one of
    their stream's first piece and their segment path is empty. An aligned plan's lanes
    (``lane_key``) carry their key as alignment key; one whose key has no data of its
    protocol (stream -1) has manifest row -1 and an empty group key (SEMANTICS 9).
    """
    n = int(lane_stream.shape[0])
    none = lane_stream < 0
    if none.any():
        lane_stream = np.where(none, 0, lane_stream)
    refs = lane_segment_refs(plan.streams, lane_stream, offsets, seq_len)
    n_pieces = int(tables.piece_mrid.shape[0])
    first_ref = np.full(n, -1, dtype=_I64)
    lanes_with, idx = np.unique(refs.lane, return_index=True)
    first_ref[lanes_with] = idx
    fallback = tables.piece_ptr[lane_stream]
    first_piece = (np.where(first_ref >= 0, refs.piece[np.maximum(first_ref, 0)], fallback)
                   if refs.piece.shape[0] else fallback)
    first_piece = np.minimum(first_piece, max(n_pieces - 1, 0))
    mrid = tables.piece_mrid[first_piece] if n_pieces else np.zeros(n, _I64)
    if none.any():
        mrid = np.where(none, -1, mrid)
    seg_off = from_numpy(np.concatenate(
        [[0], np.cumsum(np.bincount(refs.lane, minlength=n))]).astype(np.int32))

    def seg_list(values: Any) -> pa.Array:
        return pa.ListArray.from_arrays(seg_off, values)

    row_count = from_numpy(refs.row_count)
    columns = [
        tables.take("protocol", lane_protocol),
        from_numpy(mrid),
        tables.take("piece_path", np.where(first_ref >= 0, first_piece, n_pieces)),
        from_numpy(offsets),
        tables.take("group_key", np.where(none, len(tables.group_key) - 1, lane_stream)),
        tables.take("key", lane_key) if lane_key is not None and tables.key is not None
        else tables.take("alignment_key", lane_stream),
        seg_list(tables.take("piece_path", refs.piece)),
        seg_list(from_numpy(refs.row_start)),
        seg_list(row_count),
        seg_list(from_numpy(refs.window_row_start)),
        seg_list(row_count),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
