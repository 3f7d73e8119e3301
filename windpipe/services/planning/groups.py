"""Segments and groups (SEMANTICS 3b and 4), shared by the segmented strategies.

Lane windows of each sequence are cut into segments of ``k`` windows; a strategy
orders the segments and forms groups of B (``form_groups``); a group yields K
batches, lane b of step j being window j of segment b (padding past a short
segment). Everything is vectorized numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.order import window_sequences
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import DropCounts, Schedule, tail_rows
from windpipe.services.planning.streams import Streams

__all__ = ["FormGroups", "Segments", "segmented_schedule"]

_I64 = np.int64


@dataclass(frozen=True, eq=False)
class Segments:
    """The segments of an epoch in sequence order: sequence id, protocol code, B, and where
    each one's first window starts (stream and offset: what a block shuffle places it by)."""

    seq: np.ndarray  # int64 [NS]
    protocol: np.ndarray  # int16 [NS]
    batch_size: np.ndarray  # int64 [NS]
    stream: np.ndarray  # int64 [NS]
    offset: np.ndarray  # int64 [NS]


# (segments) -> (segment order, group starts in that order)
FormGroups = Callable[[Segments], tuple[np.ndarray, np.ndarray]]


def segmented_schedule(
    streams: Streams, windows: WindowTable, rules: OrderRules, *, epoch: int,
    phase: np.ndarray, form_groups: FormGroups,
) -> Schedule:
    """Lane windows from ``phase``, segments of k, groups by ``form_groups``, then batches."""
    n = streams.n_rows
    short = n < 2
    proto = streams.protocol
    seq_t = windows.seq_len[proto]
    n_all = np.where(short, 0, (n - 2 - phase) // seq_t + 1)
    n_complete = np.maximum(0, (n - 1 - phase) // seq_t)
    n_win = np.where(windows.drop_incomplete[proto] & ~short, np.minimum(n_all, n_complete),
                     n_all)
    dropped_w = n_all - n_win
    last_o = phase + (n_all - 1) * seq_t
    inc_rows = np.where(dropped_w > 0, n - 1 - last_o, 0)

    w_stream, w_idx, w_seq = window_sequences(streams, rules, n_win)
    w_off = phase[w_stream] + w_idx * seq_t[w_stream]
    n_w = w_stream.shape[0]
    k = rules.stateful_n_windows
    seq_first = np.searchsorted(w_seq, w_seq, side="left")
    pos = np.arange(n_w, dtype=_I64) - seq_first
    seg_no = np.zeros(n_w, _I64) if k == -1 else pos // max(k, 1)
    boundary = np.ones(n_w, dtype=bool)
    if n_w:
        boundary[1:] = (w_seq[1:] != w_seq[:-1]) | (seg_no[1:] != seg_no[:-1])
    seg_start = np.flatnonzero(boundary)
    seg_len = np.diff(np.append(seg_start, n_w))
    seg_proto = proto[w_stream[seg_start]]
    seg_b = windows.batch_size[seg_proto]

    seg_order, g_starts = form_groups(Segments(
        seq=w_seq[seg_start], protocol=seg_proto, batch_size=seg_b,
        stream=w_stream[seg_start], offset=w_off[seg_start]))
    seg_start, seg_len, seg_b = seg_start[seg_order], seg_len[seg_order], seg_b[seg_order]
    g_size = np.diff(np.append(g_starts, seg_start.shape[0]))
    g_steps = (
        np.maximum.reduceat(seg_len, g_starts) if g_starts.shape[0] else np.zeros(0, _I64)
    )
    g_keep = np.ones(g_starts.shape[0], dtype=bool)
    if rules.drop_incomplete_batches:
        g_keep = g_size >= seg_b[g_starts]
    drop_g, drop_steps = int((~g_keep).sum()), int(g_steps[~g_keep].sum())
    g_starts, g_size, g_steps = g_starts[g_keep], g_size[g_keep], g_steps[g_keep]

    b_group, b_step = expand_counts(g_steps)
    l_batch, l_b = expand_counts(g_size[b_group])
    seg = g_starts[b_group[l_batch]] + l_b
    j = b_step[l_batch]
    real = j < seg_len[seg]
    win = seg_start[seg] + np.minimum(j, seg_len[seg] - 1)
    lane_stream = w_stream[win]
    lane_offset = np.where(real, w_off[win], -1)
    lane_protocol = proto[lane_stream].astype(np.int16)
    lane_ptr = np.concatenate([[0], np.cumsum(g_size[b_group])]).astype(_I64)
    batch_protocol = lane_protocol[lane_ptr[:-1]]
    lane_end = np.where(
        real, np.minimum(lane_offset + seq_t[lane_stream] + 1, n[lane_stream]), 0
    )
    dropped = DropCounts(
        short_streams=int(short.sum()),
        short_stream_rows=int(n[short].sum()),
        phase_rows=int(phase[~short].sum()),
        incomplete_windows=int(dropped_w.sum()),
        incomplete_window_rows=int(inc_rows.sum()),
        incomplete_groups=drop_g,
        incomplete_group_batches=drop_steps,
        tail_rows=tail_rows(streams, n_all > 0, phase, lane_stream, lane_end),
    )
    nb = int(b_group.shape[0])
    neg = np.full(nb, -1, dtype=_I64)
    stateful = rules.stateful
    return Schedule(
        epoch=epoch,
        batch_protocol=batch_protocol,
        batch_seq_len=windows.seq_len[batch_protocol].astype(np.int32),
        batch_lane_ptr=lane_ptr,
        batch_unit=b_group,
        batch_group=b_group if stateful else neg,
        batch_step=(b_step if stateful else neg).astype(np.int32),
        batch_steps=(g_steps[b_group] if stateful else neg).astype(np.int32),
        lane_stream=lane_stream,
        lane_offset=lane_offset,
        lane_protocol=lane_protocol,
        unit_batch_ptr=np.concatenate([[0], np.cumsum(g_steps)]).astype(_I64),
        dropped=dropped,
    )
