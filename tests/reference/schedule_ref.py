"""An independent, deliberately simple reference of SEMANTICS sections 3 to 7.

Written from the spec text with plain Python loops, never calling ``catalog``: tests
compare the vectorized planner and the Flight server against it. Only the random
draws are shared with the real code, because they *are* the definition:

- phase of a stream (shuffled, ``phase_shift``):
  ``hash64("phase", seed, list(group_key), epoch) % min(T, N - 1)``;
- segment order of a class: ``rng_for("segments", seed, epoch, protocol).permutation``
  (the chained class uses ``None`` as its protocol);
- group order: ``rng_for("groups", seed, epoch).permutation``.

API:

- :class:`RefStream` - a stream as plain values; :func:`ref_streams` converts a
  ``windpipe.services.planning.streams.Streams`` (reads its plain fields only).
- :func:`reference_schedule` - all batches of an epoch in global order.
- :func:`reference_rank` - the batches of one rank's pass.
- :func:`reference_values` - the ``inputs``/``targets``/``mask`` arrays of a batch
  from per-stream column arrays (float64, NaN for null).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from windpipe.services.contract.configs import LoaderConfig, ScalingSpec
from windpipe.services.contract.identity import hash64, rng_for

__all__ = [
    "RefBatch",
    "RefStream",
    "ref_streams",
    "reference_has_channel",
    "reference_rank",
    "reference_schedule",
    "reference_values",
    "schedule_batches",
]

Lane = tuple[int, int]


@dataclass(frozen=True)
class RefStream:
    """A stream: its protocol, row count and keys."""

    protocol: str
    n_rows: int
    group_key: tuple[Any, ...]
    alignment_key: tuple[Any, ...]


@dataclass(frozen=True)
class RefBatch:
    """One batch. ``lanes[b]`` is ``(stream, offset)`` or ``None`` for padding.

    ``lane_streams``/``lane_protocols`` name every lane's stream and protocol (a
    padding lane: those of its segment's last real window). ``group``, ``step`` and
    ``steps`` are ``None`` unless stateful. ``unit`` is the schedulable unit.
    """

    lanes: tuple[Lane | None, ...]
    lane_streams: tuple[int, ...]
    lane_protocols: tuple[str, ...]
    seq_len: int
    protocol: str
    unit: int
    group: int | None = None
    step: int | None = None
    steps: int | None = None


def ref_streams(streams: Any) -> list[RefStream]:
    """Plain streams from a ``windpipe.services.planning.streams.Streams``."""
    return [
        RefStream(
            protocol=streams.protocols[int(streams.protocol[s])],
            n_rows=int(streams.n_rows[s]),
            group_key=tuple(streams.group_keys[s]),
            alignment_key=tuple(streams.alignment_keys[s]),
        )
        for s in range(len(streams.n_rows))
    ]


def _protocols(config: LoaderConfig) -> list[str]:
    if config.protocol_order is not None:
        return list(config.protocol_order)
    return sorted(config.inputs)


def _stream_order(streams: list[RefStream], config: LoaderConfig) -> list[int]:
    order = list(range(len(streams)))
    if config.protocol_order is not None:
        ranks = list(config.protocol_order)
        order.sort(key=lambda s: (ranks.index(streams[s].protocol), s))
    return order


def _plain(streams: list[RefStream], config: LoaderConfig) -> list[RefBatch]:
    out: list[RefBatch] = []
    for s in _stream_order(streams, config):
        st = streams[s]
        n = st.n_rows
        if n < 2:
            continue
        w = config.window_for(st.protocol)
        big_b, t = w.batch_size, w.seq_len
        step = w.step_rows if w.step_rows is not None else big_b * t
        k = 0
        while k * step <= n - 2:
            start = k * step
            k += 1
            lanes = [(s, start + b * t) for b in range(big_b) if start + b * t <= n - 2]
            complete = start + big_b * t + 1 <= n
            if w.drop_incomplete and not complete:
                continue
            if config.drop_incomplete_batches and len(lanes) < big_b:
                continue
            out.append(RefBatch(
                lanes=tuple(lanes), lane_streams=tuple(s for _ in lanes),
                lane_protocols=tuple(st.protocol for _ in lanes), seq_len=t,
                protocol=st.protocol, unit=len(out),
            ))
    return out


def _phase(st: RefStream, config: LoaderConfig, epoch: int) -> int:
    if config.strategy != "shuffled" or not config.phase_shift:
        return 0
    t = config.window_for(st.protocol).seq_len
    return hash64("phase", config.seed, list(st.group_key), epoch) % min(t, st.n_rows - 1)


def _windows(s: int, st: RefStream, config: LoaderConfig, epoch: int) -> list[Lane]:
    if st.n_rows < 2:
        return []
    w = config.window_for(st.protocol)
    out = []
    o = _phase(st, config, epoch)
    while o <= st.n_rows - 2:
        if not w.drop_incomplete or o + w.seq_len + 1 <= st.n_rows:
            out.append((s, o))
        o += w.seq_len
    return out


def _sequences(streams: list[RefStream], config: LoaderConfig, epoch: int) -> list[list[Lane]]:
    if config.cross_protocol_state_carry != "chain":
        return [_windows(s, streams[s], config, epoch) for s in _stream_order(streams, config)]
    protocols = _protocols(config)
    chains: dict[tuple[Any, ...], list[int]] = {}
    for s, st in enumerate(streams):
        chains.setdefault(st.alignment_key, []).append(s)
    out = []
    for chained in chains.values():
        members = sorted(chained, key=lambda s: (protocols.index(streams[s].protocol), s))
        out.append([lane for s in members for lane in _windows(s, streams[s], config, epoch)])
    return out


def _cut(seq: list[Lane], k: int) -> list[list[Lane]]:
    if not seq:
        return []
    if k == -1:
        return [seq]
    size = max(k, 1)
    return [seq[i:i + size] for i in range(0, len(seq), size)]


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _groups(streams: list[RefStream], config: LoaderConfig, epoch: int) -> list[list[list[Lane]]]:
    k = config.stateful_n_windows
    chain = config.cross_protocol_state_carry == "chain"

    def batch_size(segment: list[Lane]) -> int:
        return config.window_for(streams[segment[0][0]].protocol).batch_size

    if config.strategy == "sequential":
        groups = []
        for seq in _sequences(streams, config, epoch):
            segs = _cut(seq, k)
            if segs:
                groups.extend(_chunks(segs, batch_size(segs[0])))
        return groups
    by_class: dict[str | None, list[list[Lane]]] = {}
    for seq in _sequences(streams, config, epoch):
        for seg in _cut(seq, k):
            key = None if chain else streams[seg[0][0]].protocol
            by_class.setdefault(key, []).append(seg)
    all_groups = []
    for key in ([None] if chain else _protocols(config)):
        segs = by_class.get(key, [])
        if not segs:
            continue
        perm = rng_for("segments", config.seed, epoch, key).permutation(len(segs))
        all_groups.extend(_chunks([segs[i] for i in perm], batch_size(segs[0])))
    perm = rng_for("groups", config.seed, epoch).permutation(len(all_groups))
    return [all_groups[i] for i in perm]


def _segmented(streams: list[RefStream], config: LoaderConfig, epoch: int) -> list[RefBatch]:
    stateful = config.stateful_n_windows != 0
    out: list[RefBatch] = []
    unit = 0
    for group in _groups(streams, config, epoch):
        big_b = config.window_for(streams[group[0][0][0]].protocol).batch_size
        if config.drop_incomplete_batches and len(group) < big_b:
            continue
        steps = max(len(seg) for seg in group)
        for j in range(steps):
            lanes = tuple(seg[j] if j < len(seg) else None for seg in group)
            lane_streams = tuple(seg[min(j, len(seg) - 1)][0] for seg in group)
            protos = tuple(streams[s].protocol for s in lane_streams)
            out.append(RefBatch(
                lanes=lanes, lane_streams=lane_streams, lane_protocols=protos,
                seq_len=config.window_for(protos[0]).seq_len, protocol=protos[0], unit=unit,
                group=unit if stateful else None, step=j if stateful else None,
                steps=steps if stateful else None,
            ))
        unit += 1
    return out


def reference_schedule(
    streams: list[RefStream], config: LoaderConfig, epoch: int
) -> list[RefBatch]:
    """Every batch of ``epoch`` in global order."""
    if config.strategy == "sequential" and config.stateful_n_windows == 0:
        return _plain(streams, config)
    return _segmented(streams, config, epoch)


def reference_rank(
    streams: list[RefStream], config: LoaderConfig, epoch: int, *, rank: int, world_size: int
) -> list[RefBatch]:
    """Rank ``rank``'s pass: units ``rank, rank + W, ...``; trimmed to the smallest rank
    when ``config.drop_incomplete_distributed``."""
    batches = reference_schedule(streams, config, epoch)
    per_rank: list[list[RefBatch]] = [[] for _ in range(world_size)]
    for batch in batches:
        per_rank[batch.unit % world_size].append(batch)
    mine = per_rank[rank]
    if config.drop_incomplete_distributed:
        mine = mine[: min(len(r) for r in per_rank)]
    return mine


def _scale(x: float, spec: ScalingSpec | None) -> float:
    if spec is None or math.isnan(x):
        return x
    if spec.transform == "standard":
        return (x - spec.mean) / spec.std
    lo, hi, v = spec.input_min, spec.input_max, x
    if spec.transform == "log1p":
        if x <= -1.0:
            return math.nan
        lo, hi, v = math.log1p(lo), math.log1p(hi), math.log1p(x)
    y = spec.output_min + (v - lo) * (spec.output_max - spec.output_min) / (hi - lo)
    if spec.clip:
        y = min(max(y, min(spec.output_min, spec.output_max)),
                max(spec.output_min, spec.output_max))
    return y


def reference_values(
    batch: RefBatch, streams: list[RefStream], data: list[dict[str, np.ndarray]],
    config: LoaderConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(inputs, targets, mask)`` of a batch; ``data[s][column]`` is stream ``s``'s column
    (float64, NaN for null), one value per row. A column absent from ``data[s]`` is one
    the stream lacks: -2.0 / NaN, and a lane whose stream lacks a target column its
    protocol names has a False mask (SEMANTICS 5, missing channels)."""
    in_cols = config.input_columns(batch.protocol)
    out_cols = config.target_columns(batch.protocol)
    n_lanes, t_len = len(batch.lanes), batch.seq_len
    inputs = np.full((n_lanes, t_len, len(in_cols)), -2.0, dtype=np.float32)
    targets = np.full((n_lanes, t_len, len(out_cols)), np.nan, dtype=np.float32)
    mask = np.zeros((n_lanes, t_len), dtype=bool)
    for b, lane in enumerate(batch.lanes):
        if lane is None:
            continue
        s, o = lane
        n = streams[s].n_rows
        protocol = streams[s].protocol
        has_targets = all(col in data[s] for col in config.targets[protocol])
        for t in range(t_len):
            row = o + t
            if row < n:
                for c, col in enumerate(in_cols):
                    if col in config.inputs[protocol] and col in data[s]:
                        y = _scale(float(data[s][col][row]), config.scaling_for(col))
                        inputs[b, t, c] = y if math.isfinite(y) else -2.0
            if row + 1 < n:
                mask[b, t] = has_targets
                for c, col in enumerate(out_cols):
                    if col in config.targets[protocol] and col in data[s]:
                        targets[b, t, c] = _scale(
                            float(data[s][col][row + 1]), config.scaling_for(col)
                        )
    return inputs, targets, mask


def reference_has_channel(
    batch: RefBatch, streams: list[RefStream], data: list[dict[str, Any]], config: LoaderConfig,
) -> tuple[tuple[str, ...], np.ndarray]:
    """The batch's channels (inputs, then targets that are not inputs) and ``has_channel``
    ``(B, C)``: lane b's stream (padding lanes too) has the column and its protocol names it."""
    in_cols = config.input_columns(batch.protocol)
    out_cols = config.target_columns(batch.protocol)
    channels = tuple(dict.fromkeys((*in_cols, *out_cols)))
    has = np.zeros((len(batch.lane_streams), len(channels)), dtype=bool)
    for b, s in enumerate(batch.lane_streams):
        protocol = streams[s].protocol
        named = {*config.inputs[protocol], *config.targets[protocol]}
        for c, col in enumerate(channels):
            has[b, c] = col in named and col in data[s]
    return channels, has


def schedule_batches(
    schedule: Any, protocols: tuple[str, ...], batch_ids: Any = None
) -> list[RefBatch]:
    """Convert batches of a ``windpipe.services.planning.schedule.Schedule`` into :class:`RefBatch`
    values
    (a pure re-labelling, for comparison with :func:`reference_schedule`)."""
    ids = range(int(schedule.batch_unit.shape[0])) if batch_ids is None else batch_ids
    out = []
    for i in ids:
        lo, hi = int(schedule.batch_lane_ptr[i]), int(schedule.batch_lane_ptr[i + 1])
        stream = [int(s) for s in schedule.lane_stream[lo:hi]]
        offset = [int(o) for o in schedule.lane_offset[lo:hi]]
        group = int(schedule.batch_group[i])
        out.append(RefBatch(
            lanes=tuple(None if o < 0 else (s, o) for s, o in zip(stream, offset, strict=True)),
            lane_streams=tuple(stream),
            lane_protocols=tuple(protocols[int(p)] for p in schedule.lane_protocol[lo:hi]),
            seq_len=int(schedule.batch_seq_len[i]),
            protocol=protocols[int(schedule.batch_protocol[i])],
            unit=int(schedule.batch_unit[i]),
            group=None if group < 0 else group,
            step=None if group < 0 else int(schedule.batch_step[i]),
            steps=None if group < 0 else int(schedule.batch_steps[i]),
        ))
    return out
