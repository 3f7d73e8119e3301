"""The plan report: what an epoch yields, costs and drops (SEMANTICS section 7).

A :class:`~services.contract.reports.PlanReport` (the wire contract) computed from a
:class:`~services.planning.schedule.Schedule`. For
``shuffled`` plans every number belongs to the schedule's epoch (phases and
permutations change the counts slightly from one epoch to the next).
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from services.contract.configs import PlanSpec
from services.contract.reports import AlignedReport, DroppedReport, PlanReport, ProtocolReport
from services.planning.ranks import rank_batch_counts, trimmed_batches
from services.planning.schedule import Schedule
from services.planning.sizes import channel_counts, chunk_row_bytes, token_bytes
from services.planning.streams import Streams

__all__ = ["plan_report"]


def _real_rows(streams: Streams, schedule: Schedule, seq_len: np.ndarray) -> np.ndarray:
    """Mask-true positions of each lane: ``min(T, N-1-o)`` for real lanes, else 0."""
    off = schedule.lane_offset
    n = streams.n_rows[schedule.lane_stream] if off.shape[0] else np.zeros(0, np.int64)
    return np.where(off >= 0, np.minimum(seq_len, n - 1 - off), 0)


def _working_set(
    streams: Streams, spec: PlanSpec, schedule: Schedule, lane_t: np.ndarray, *,
    row_bytes: np.ndarray, chunk_rows: dict[str, int] | None,
) -> int:
    """Upper bound of the chunk bytes one batch touches, max over batches.

    A lane reads ``T+1`` rows, which touch at most ``ceil((T+1)/R) + 1`` chunks of
    ``R`` rows plus one more per piece boundary it crosses (bounded by 1 here, as
    lanes rarely span more than two pieces; ``R`` defaults to ``T+1``).
    """
    if schedule.n_batches == 0:
        return 0
    rows = np.asarray(
        [(chunk_rows or {}).get(p, spec.window_for(p).seq_len + 1) for p in streams.protocols],
        dtype=np.int64,
    )
    proto = schedule.lane_protocol.astype(np.int64)
    r = rows[proto]
    chunks = -(-(lane_t + 1) // r) + 2
    lane_bytes = np.where(schedule.lane_offset >= 0, chunks * r * row_bytes[proto], 0)
    per_batch = np.add.reduceat(lane_bytes, schedule.batch_lane_ptr[:-1])
    return int(per_batch.reshape(-1, schedule.parts).sum(axis=1).max())


def plan_report(
    streams: Streams,
    spec: PlanSpec,
    schedule: Schedule,
    *,
    world_size: int = 1,
    chunk_rows: dict[str, int] | None = None,
) -> PlanReport:
    """Batches, lanes, tokens, bytes and drops of ``schedule`` for ``world_size`` ranks.

    ``chunk_rows`` is the largest chunk (rows) of each protocol's segments, for the
    cache working-set bound (default ``T+1``).
    """
    names = streams.protocols
    lanes_per_batch = schedule.batch_lanes
    lane_batch = np.repeat(np.arange(schedule.n_batches), lanes_per_batch)
    lane_t = schedule.batch_seq_len.astype(np.int64)[lane_batch]
    real = _real_rows(streams, schedule, lane_t)
    channels = {p: channel_counts(spec, p) for p in names}
    per_token = np.asarray([token_bytes(*channels[p]) for p in names], dtype=np.int64)
    row_bytes = np.asarray([chunk_row_bytes(*channels[p]) for p in names], dtype=np.int64)
    batch_bytes = (
        lanes_per_batch * schedule.batch_seq_len.astype(np.int64)
        * per_token[schedule.batch_protocol.astype(np.int64)]
    ) if schedule.n_batches else np.zeros(0, np.int64)

    parts = schedule.parts  # an aligned batch is one part batch per protocol
    counts = rank_batch_counts(schedule, world_size) // parts
    trim = spec.drop_incomplete_distributed
    per_rank = [int(counts.min())] * world_size if trim else counts.tolist()
    protocols: dict[str, ProtocolReport] = {}
    for code, p in enumerate(names):
        w = spec.window_for(p)
        in_b = schedule.batch_protocol == code
        in_l = schedule.lane_protocol == code
        c_in, c_out = channels[p]
        protocols[p] = ProtocolReport(
            streams=int((streams.protocol == code).sum()),
            rows=int(streams.n_rows[streams.protocol == code].sum()),
            batch_size=w.batch_size,
            seq_len=w.seq_len,
            input_channels=c_in,
            target_channels=c_out,
            bytes_per_full_batch=w.batch_size * w.seq_len * token_bytes(c_in, c_out),
            batches=int(in_b.sum()),
            lanes=int(in_l.sum()),
            padding_lanes=int((in_l & (schedule.lane_offset < 0)).sum()),
            tokens=int(lane_t[in_l].sum()),
            real_tokens=int(real[in_l].sum()),
        )
    aligned = AlignedReport(
        parts_per_batch=parts,
        keys=int(np.unique(schedule.lane_key).shape[0]) if schedule.lane_key is not None else 0,
    ) if parts > 1 else None
    return PlanReport(
        epoch=int(schedule.epoch),
        strategy=spec.strategy,
        epoch_dependent=spec.strategy == "shuffled",
        streams=int(streams.count),
        rows=int(streams.n_rows.sum()),
        batches=int(schedule.n_consumer_batches),
        units=int(schedule.n_units),
        world_size=world_size,
        batches_per_rank_untrimmed=[int(c) for c in counts.tolist()],
        batches_per_rank=[int(c) for c in per_rank],
        lanes=int(lanes_per_batch.sum()),
        padding_lanes=int((schedule.lane_offset < 0).sum()),
        tokens=int(lane_t.sum()),
        real_tokens=int(real.sum()),
        bytes=int(batch_bytes.sum()),
        max_batch_bytes=int(batch_bytes.reshape(-1, parts).sum(axis=1).max())
        if schedule.n_batches else 0,
        dropped=DroppedReport(
            **{k: int(v) for k, v in asdict(schedule.dropped).items()},
            distributed_trimmed_batches=trimmed_batches(schedule, world_size) // parts
            if trim else 0,
        ),
        protocols=protocols,
        aligned=aligned,
        cache_working_set_bytes=_working_set(
            streams, spec, schedule, lane_t, row_bytes=row_bytes, chunk_rows=chunk_rows,
        ),
    )
