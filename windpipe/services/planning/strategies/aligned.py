"""``align_by="alignment_key"``: B keys per batch, every protocol side by side (SEMANTICS 9).

:func:`windpipe.services.planning.aligned.aligned_epoch` decides the keys, steps and lane windows;
this lays them out as an ordinary :class:`~services.planning.schedule.Schedule` in which
every aligned batch is ``P`` consecutive part batches, one per protocol (in the
plan's protocol order), all of the same lanes (keys). A part lane whose key has no
window of that protocol reads nothing (``lane_stream`` -1, ``lane_offset`` -1). A
group of keys is one unit, so its ``K * P`` part batches stay on one rank,
consecutive. ``sequential`` is the same in every epoch; ``shuffled`` permutes keys
per epoch.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.planning.aligned import aligned_epoch
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import DropCounts, Schedule
from windpipe.services.planning.streams import Streams

__all__ = ["schedule"]

_I64 = np.int64


def schedule(streams: Streams, windows: WindowTable, rules: OrderRules, epoch: int) -> Schedule:
    """The aligned epoch as part batches (batch-major, protocol-minor)."""
    al = aligned_epoch(streams, windows, rules, epoch)
    n_p = len(streams.protocols)
    nb = al.n_batches
    lanes = np.diff(al.batch_lane_ptr)
    part_lanes = np.repeat(lanes, n_p)
    nl = int(lanes.sum())
    # lane arrays [P, NL] -> part-major per batch: batch i, part p, its lanes
    batch_of_lane = np.repeat(np.arange(nb, dtype=_I64), lanes)
    within = np.arange(nl, dtype=_I64) - al.batch_lane_ptr[batch_of_lane]
    part_ptr = np.concatenate([[0], np.cumsum(part_lanes)]).astype(_I64)
    dest = (part_ptr[batch_of_lane[None, :] * n_p + np.arange(n_p, dtype=_I64)[:, None]]
            + within[None, :])
    has = al.key_windows[al.lane_key].T > 0  # [P, NL]
    lane_stream = np.empty(n_p * nl, dtype=_I64)
    lane_offset = np.empty(n_p * nl, dtype=_I64)
    lane_protocol = np.empty(n_p * nl, dtype=np.int16)
    lane_key = np.empty(n_p * nl, dtype=_I64)
    lane_stream[dest] = np.where(has, al.lane_stream, -1)
    lane_offset[dest] = al.lane_offset
    lane_protocol[dest] = np.arange(n_p, dtype=np.int16)[:, None]
    lane_key[dest] = al.lane_key[None, :]
    part_code = np.tile(np.arange(n_p, dtype=np.int16), nb)
    rep = np.repeat(np.arange(nb, dtype=_I64), n_p)
    return Schedule(
        epoch=epoch,
        batch_protocol=part_code,
        batch_seq_len=windows.seq_len[part_code].astype(np.int32),
        batch_lane_ptr=part_ptr,
        batch_unit=al.batch_group[rep].astype(_I64),
        batch_group=al.batch_group[rep].astype(_I64),
        batch_step=al.batch_step[rep].astype(np.int32),
        batch_steps=al.batch_steps[rep].astype(np.int32),
        lane_stream=lane_stream,
        lane_offset=lane_offset,
        lane_protocol=lane_protocol,
        unit_batch_ptr=(al.unit_batch_ptr * n_p).astype(_I64),
        dropped=_dropped(streams, windows, al.dropped_groups, al.dropped_group_batches),
        parts=n_p,
        lane_key=lane_key,
    )


def _dropped(streams: Streams, windows: WindowTable, groups: int, batches: int) -> DropCounts:
    """Streams with no lane window, partial windows left out, groups left out."""
    n = streams.n_rows
    code = streams.protocol.astype(_I64)
    t, drop = windows.seq_len[code], windows.drop_incomplete[code]
    some = np.where(n >= 2, (n - 2) // t + 1, 0)
    complete = np.where(n >= 1, (n - 1) // t, 0)
    short = np.where(drop, complete, some) == 0
    partial = drop & (some > complete) & ~short
    return DropCounts(
        short_streams=int(short.sum()), short_stream_rows=int(n[short].sum()),
        incomplete_windows=int(partial.sum()),
        incomplete_window_rows=int((n - 1 - complete * t)[partial].sum()),
        incomplete_groups=groups, incomplete_group_batches=batches,
    )
