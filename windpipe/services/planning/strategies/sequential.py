"""``sequential``: the user's ``sequential`` with ``stateful_n_windows = 0``, plain windows
(SEMANTICS 3a); with state it is :mod:`.stateful`.

Window k of a stream starts at ``k*step`` and is carved into B contiguous lanes of T
rows; each window is one batch and one unit. The same in every epoch.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.order import stream_order
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import DropCounts, Schedule, tail_rows
from windpipe.services.planning.streams import Streams

__all__ = ["schedule"]

_I64 = np.int64


def schedule(streams: Streams, windows: WindowTable, rules: OrderRules, epoch: int) -> Schedule:
    """Fixed windows of B lanes, one batch (and unit) each; ``epoch`` only labels it."""
    n = streams.n_rows
    short = n < 2
    order = stream_order(streams, rules)
    order = order[~short[order]]
    proto = streams.protocol[order]
    big_b, seq_t, step = windows.batch_size[proto], windows.seq_len[proto], windows.step[proto]
    n_o = n[order]
    owner, k = expand_counts((n_o - 2) // step + 1)
    s_k = k * step[owner]
    b_w, t_w, n_w = big_b[owner], seq_t[owner], n_o[owner]
    lanes = np.minimum(b_w, (n_w - 2 - s_k) // t_w + 1)
    complete = s_k + b_w * t_w + 1 <= n_w
    drop = windows.drop_incomplete[proto][owner] & ~complete
    if rules.drop_incomplete_batches:
        drop |= lanes < b_w
    kept = ~drop
    lanes_k = lanes[kept]
    b_owner, b_pos = expand_counts(lanes_k)
    w_stream = order[owner[kept]]
    lane_stream = w_stream[b_owner]
    lane_offset = s_k[kept][b_owner] + b_pos * t_w[kept][b_owner]
    lane_end = np.minimum(lane_offset + t_w[kept][b_owner] + 1, n[lane_stream])
    nb = int(lanes_k.shape[0])
    dropped_rows = np.minimum(lanes * t_w, n_w - 1 - s_k)[drop]
    gap = np.maximum(step[owner] - b_w * t_w, 0)
    has_next = s_k + step[owner] <= n_w - 2
    dropped = DropCounts(
        short_streams=int(short.sum()),
        short_stream_rows=int(n[short].sum()),
        incomplete_windows=int(drop.sum()),
        incomplete_window_rows=int(dropped_rows.sum()),
        tail_rows=tail_rows(streams, ~short, np.zeros(streams.count, _I64), lane_stream,
                            lane_end),
        step_gap_rows=int(gap[has_next].sum()),
    )
    batch_protocol = streams.protocol[w_stream]
    neg = np.full(nb, -1, dtype=_I64)
    return Schedule(
        epoch=epoch,
        batch_protocol=batch_protocol.astype(np.int16),
        batch_seq_len=windows.seq_len[batch_protocol].astype(np.int32),
        batch_lane_ptr=np.concatenate([[0], np.cumsum(lanes_k)]).astype(_I64),
        batch_unit=np.arange(nb, dtype=_I64),
        batch_group=neg,
        batch_step=neg.astype(np.int32),
        batch_steps=neg.astype(np.int32),
        lane_stream=lane_stream,
        lane_offset=lane_offset,
        lane_protocol=streams.protocol[lane_stream].astype(np.int16),
        unit_batch_ptr=np.arange(nb + 1, dtype=_I64),
        dropped=dropped,
    )
