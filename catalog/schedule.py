"""The batches of one epoch as a pure function of a plan (SEMANTICS sections 3, 4, 7).

An epoch's :class:`Schedule` is its global order, independent of the world size.
Batch ``i`` holds lanes ``batch_lane_ptr[i]:batch_lane_ptr[i+1]``; a lane is a lane
window ``(lane_stream, lane_offset)`` of ``batch_seq_len[i]`` input rows, or padding
(``lane_offset == -1``; ``lane_stream`` then still names the stream of the lane's
segment, for its keys). ``lane_protocol`` is the protocol code of each lane (differs
within a batch only under chain). Units (single batches, or whole stateful groups)
are ``unit_batch_ptr``; rank ``r`` of ``W`` takes units ``r, r+W, ...``
(:mod:`catalog.ranks`).

Everything is vectorized numpy; the only Python loops run over streams (phase
hashes) and protocols. Readings of the spec are in ``docs/semantics-notes.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from catalog.segment_refs import expand_counts
from catalog.streams import Streams
from contract.configs import LoaderConfig
from contract.errors import ErrorType, WindpipeError
from contract.identity import hash64, rng_for

__all__ = [
    "DropCounts",
    "Schedule",
    "epoch_schedule",
    "stream_phases",
]

_I64 = np.int64


@dataclass(frozen=True)
class DropCounts:
    """What an epoch leaves out, for the plan report (SEMANTICS section 7).

    Row counts are input rows with a real target. ``tail_rows`` is, per stream
    that yields something, the rows after the last row any kept lane reads
    (it overlaps the incomplete-window and incomplete-group counts).
    ``step_gap_rows`` (3a with ``step_rows > B*T``) is the rows between one window's
    last lane and the next window that no lane takes as input.
    """

    short_streams: int = 0
    short_stream_rows: int = 0
    phase_rows: int = 0
    incomplete_windows: int = 0
    incomplete_window_rows: int = 0
    incomplete_groups: int = 0
    incomplete_group_batches: int = 0
    tail_rows: int = 0
    step_gap_rows: int = 0


@dataclass(frozen=True, eq=False)
class Schedule:
    """One epoch's batches in global order."""

    epoch: int
    batch_protocol: np.ndarray  # int16 [NB] (under chain: protocol of lane 0)
    batch_seq_len: np.ndarray  # int32 [NB]
    batch_lane_ptr: np.ndarray  # int64 [NB+1]
    batch_unit: np.ndarray  # int64 [NB]
    batch_group: np.ndarray  # int64 [NB]; -1 unless stateful
    batch_step: np.ndarray  # int32 [NB]; -1 unless stateful
    batch_steps: np.ndarray  # int32 [NB]; -1 unless stateful
    lane_stream: np.ndarray  # int64 [NL]
    lane_offset: np.ndarray  # int64 [NL]; -1 = padding
    lane_protocol: np.ndarray  # int16 [NL]
    unit_batch_ptr: np.ndarray  # int64 [NU+1]
    dropped: DropCounts = field(default_factory=DropCounts)

    @property
    def n_batches(self) -> int:
        """Batches in the epoch (all ranks together)."""
        return int(self.batch_unit.shape[0])

    @property
    def n_units(self) -> int:
        """Schedulable units (batches in 3a, groups in 3b)."""
        return int(self.unit_batch_ptr.shape[0] - 1)

    @property
    def batch_lanes(self) -> np.ndarray:
        """Lanes per batch (int64 [NB])."""
        return np.diff(self.batch_lane_ptr)


def _protocol_table(config: LoaderConfig, protocols: tuple[str, ...]) -> dict[str, np.ndarray]:
    wins = [config.window_for(p) for p in protocols]
    return {
        "B": np.asarray([w.batch_size for w in wins], dtype=_I64),
        "T": np.asarray([w.seq_len for w in wins], dtype=_I64),
        "step": np.asarray([w.step for w in wins], dtype=_I64),
        "drop": np.asarray([w.drop_incomplete for w in wins], dtype=bool),
    }


def stream_phases(streams: Streams, config: LoaderConfig, epoch: int) -> np.ndarray:
    """Phase of each stream (SEMANTICS 3b): 0 unless ``shuffled`` with ``phase_shift``.

    ``p = hash64("phase", seed, [group key values], epoch) % min(T, N-1)``.
    """
    phases = np.zeros(streams.count, dtype=_I64)
    if config.strategy != "shuffled" or not config.phase_shift:
        return phases
    seq_len = _protocol_table(config, streams.protocols)["T"][streams.protocol]
    for s in np.flatnonzero(streams.n_rows >= 2):
        span = min(int(seq_len[s]), int(streams.n_rows[s]) - 1)
        phases[s] = hash64("phase", config.seed, list(streams.group_keys[s]), epoch) % span
    return phases


def _protocol_rank(streams: Streams, config: LoaderConfig) -> np.ndarray:
    """Position of each stream's protocol in ``config.ordered_protocols()``."""
    ordered = config.ordered_protocols()
    pos = np.asarray([ordered.index(p) for p in streams.protocols], dtype=_I64)
    return pos[streams.protocol] if streams.count else np.zeros(0, _I64)


def _sequential_order(streams: Streams, config: LoaderConfig) -> np.ndarray:
    idx = np.arange(streams.count, dtype=_I64)
    if config.protocol_order is None:
        return idx
    return np.lexsort((idx, _protocol_rank(streams, config)))


def _tail_rows(
    streams: Streams, useful: np.ndarray, start: np.ndarray, lane_stream: np.ndarray,
    lane_end: np.ndarray,
) -> int:
    ends = start.copy()
    np.maximum.at(ends, lane_stream, lane_end)
    return int((streams.n_rows - ends)[useful].sum())


def _empty_schedule(epoch: int, dropped: DropCounts) -> Schedule:
    z = np.zeros(0, dtype=_I64)
    return Schedule(
        epoch=epoch, batch_protocol=z.astype(np.int16), batch_seq_len=z.astype(np.int32),
        batch_lane_ptr=np.zeros(1, _I64), batch_unit=z, batch_group=z,
        batch_step=z.astype(np.int32), batch_steps=z.astype(np.int32), lane_stream=z,
        lane_offset=z, lane_protocol=z.astype(np.int16), unit_batch_ptr=np.zeros(1, _I64),
        dropped=dropped,
    )


def _plain_schedule(streams: Streams, config: LoaderConfig, epoch: int) -> Schedule:
    """SEMANTICS 3a: fixed windows of B lanes, one batch (and unit) each."""
    tab = _protocol_table(config, streams.protocols)
    n = streams.n_rows
    short = n < 2
    order = _sequential_order(streams, config)
    order = order[~short[order]]
    proto = streams.protocol[order]
    big_b, seq_t, step = tab["B"][proto], tab["T"][proto], tab["step"][proto]
    n_o = n[order]
    owner, k = expand_counts((n_o - 2) // step + 1)
    s_k = k * step[owner]
    b_w, t_w, n_w = big_b[owner], seq_t[owner], n_o[owner]
    lanes = np.minimum(b_w, (n_w - 2 - s_k) // t_w + 1)
    complete = s_k + b_w * t_w + 1 <= n_w
    drop = (tab["drop"][proto][owner] & ~complete)
    if config.drop_incomplete_batches:
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
        tail_rows=_tail_rows(streams, ~short, np.zeros(streams.count, _I64), lane_stream,
                             lane_end),
        step_gap_rows=int(gap[has_next].sum()),
    )
    batch_protocol = streams.protocol[w_stream]
    neg = np.full(nb, -1, dtype=_I64)
    return Schedule(
        epoch=epoch,
        batch_protocol=batch_protocol.astype(np.int16),
        batch_seq_len=tab["T"][batch_protocol].astype(np.int32),
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


def _chain_sequences(streams: Streams) -> np.ndarray:
    """Sequence id of each stream under chain: alignment key, in first-occurrence order."""
    ids: dict[tuple[object, ...], int] = {}
    return np.asarray(
        [ids.setdefault(k, len(ids)) for k in streams.alignment_keys], dtype=_I64
    )


def _segment_windows(
    streams: Streams, config: LoaderConfig, n_windows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows in sequence order: ``(stream, index in stream, sequence rank)``."""
    idx = np.arange(streams.count, dtype=_I64)
    if config.cross_protocol_state_carry == "chain":
        seq = _chain_sequences(streams)
        order = np.lexsort((idx, _protocol_rank(streams, config), seq))
        seq_o = seq[order]
    else:
        order = _sequential_order(streams, config)
        seq_o = np.arange(streams.count, dtype=_I64)
    owner, w_idx = expand_counts(n_windows[order])
    return order[owner], w_idx, seq_o[owner]


def _groups_sequential(
    seg_seq: np.ndarray, seg_b: np.ndarray
) -> np.ndarray:
    """Segment order is kept; groups of B within one sequence. Returns group starts."""
    first = np.searchsorted(seg_seq, seg_seq, side="left")
    j = np.arange(seg_seq.shape[0], dtype=_I64) - first
    return np.flatnonzero(j % seg_b == 0)


def _groups_shuffled(
    seg_class: np.ndarray, seg_b: np.ndarray, class_keys: list[str | None],
    config: LoaderConfig, epoch: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Segment permutation per class, groups of B, then a permutation of all groups.

    Returns ``(segment order, group starts in that order)``.
    """
    perms: list[np.ndarray] = []
    group_of: list[np.ndarray] = []
    n_groups = 0
    for c, key in enumerate(class_keys):
        members = np.flatnonzero(seg_class == c)
        if members.shape[0] == 0:
            continue
        members = members[rng_for("segments", config.seed, epoch, key).permutation(
            members.shape[0])]
        big_b = int(seg_b[members[0]])
        g = np.arange(members.shape[0], dtype=_I64) // big_b
        perms.append(members)
        group_of.append(g + n_groups)
        n_groups += int(g[-1]) + 1
    if not perms:
        return np.zeros(0, _I64), np.zeros(0, _I64)
    segs = np.concatenate(perms)
    sizes = np.bincount(np.concatenate(group_of), minlength=n_groups).astype(_I64)
    starts = np.cumsum(sizes) - sizes
    order = rng_for("groups", config.seed, epoch).permutation(n_groups)
    owner, pos = expand_counts(sizes[order])
    new_sizes = sizes[order]
    return segs[starts[order][owner] + pos], np.cumsum(new_sizes) - new_sizes


def _segment_schedule(streams: Streams, config: LoaderConfig, epoch: int) -> Schedule:
    """SEMANTICS 3b and 4: lane windows, segments of k, groups of B segments."""
    tab = _protocol_table(config, streams.protocols)
    n = streams.n_rows
    short = n < 2
    proto = streams.protocol
    seq_t = tab["T"][proto]
    phase = stream_phases(streams, config, epoch)
    n_all = np.where(short, 0, (n - 2 - phase) // seq_t + 1)
    n_complete = np.maximum(0, (n - 1 - phase) // seq_t)
    n_win = np.where(tab["drop"][proto] & ~short, np.minimum(n_all, n_complete), n_all)
    dropped_w = n_all - n_win
    last_o = phase + (n_all - 1) * seq_t
    inc_rows = np.where(dropped_w > 0, n - 1 - last_o, 0)

    w_stream, w_idx, w_seq = _segment_windows(streams, config, n_win)
    w_off = phase[w_stream] + w_idx * seq_t[w_stream]
    n_w = w_stream.shape[0]
    k = config.stateful_n_windows
    chain = config.cross_protocol_state_carry == "chain"
    seq_first = np.searchsorted(w_seq, w_seq, side="left")
    pos = np.arange(n_w, dtype=_I64) - seq_first
    seg_no = np.zeros(n_w, _I64) if k == -1 else pos // max(k, 1)
    boundary = np.ones(n_w, dtype=bool)
    if n_w:
        boundary[1:] = (w_seq[1:] != w_seq[:-1]) | (seg_no[1:] != seg_no[:-1])
    seg_start = np.flatnonzero(boundary)
    seg_len = np.diff(np.append(seg_start, n_w))
    seg_proto = proto[w_stream[seg_start]]
    seg_b = tab["B"][seg_proto]

    if config.strategy == "sequential":
        seg_order = np.arange(seg_start.shape[0], dtype=_I64)
        g_starts = _groups_sequential(w_seq[seg_start], seg_b)
    else:
        ordered = config.ordered_protocols()
        to_class = np.asarray([ordered.index(p) for p in streams.protocols], dtype=_I64)
        seg_class = np.zeros_like(seg_proto) if chain else to_class[seg_proto]
        keys: list[str | None] = [None] if chain else list(ordered)
        seg_order, g_starts = _groups_shuffled(seg_class, seg_b, keys, config, epoch)
    seg_start, seg_len, seg_b = seg_start[seg_order], seg_len[seg_order], seg_b[seg_order]
    g_size = np.diff(np.append(g_starts, seg_start.shape[0]))
    g_steps = (
        np.maximum.reduceat(seg_len, g_starts) if g_starts.shape[0] else np.zeros(0, _I64)
    )
    g_keep = np.ones(g_starts.shape[0], dtype=bool)
    if config.drop_incomplete_batches:
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
    useful = n_all > 0
    dropped = DropCounts(
        short_streams=int(short.sum()),
        short_stream_rows=int(n[short].sum()),
        phase_rows=int(phase[~short].sum()),
        incomplete_windows=int(dropped_w.sum()),
        incomplete_window_rows=int(inc_rows.sum()),
        incomplete_groups=drop_g,
        incomplete_group_batches=drop_steps,
        tail_rows=_tail_rows(streams, useful, phase, lane_stream, lane_end),
    )
    stateful = k != 0
    nb = int(b_group.shape[0])
    neg = np.full(nb, -1, dtype=_I64)
    return Schedule(
        epoch=epoch,
        batch_protocol=batch_protocol,
        batch_seq_len=tab["T"][batch_protocol].astype(np.int32),
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


def epoch_schedule(streams: Streams, config: LoaderConfig, epoch: int) -> Schedule:
    """All batches of ``epoch`` in global order (SEMANTICS sections 3a, 3b, 4, 7)."""
    if epoch < 0:
        raise WindpipeError(ErrorType.INVALID_REQUEST, f"epoch must be >= 0, got {epoch}",
                            details={"epoch": epoch})
    if streams.count == 0:
        return _empty_schedule(epoch, DropCounts())
    if config.strategy == "sequential" and config.stateful_n_windows == 0:
        return _plain_schedule(streams, config, epoch)
    return _segment_schedule(streams, config, epoch)
