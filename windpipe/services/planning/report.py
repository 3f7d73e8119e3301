"""The plan report: what an epoch yields, costs and drops (SEMANTICS section 7).

A :class:`~services.contract.reports.PlanReportData` (the wire contract) computed from a
:class:`~services.planning.schedule.Schedule`. For
``shuffled`` and ``block_shuffled`` plans every number belongs to the schedule's epoch
(phases and permutations change the counts slightly from one epoch to the next).
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.reports import (
    AlignedReport,
    DroppedReport,
    PlanReportData,
    ProtocolReport,
    ReportWarning,
    ShuffleBlocksReport,
)
from windpipe.services.planning.channels import lacks_target
from windpipe.services.planning.ranks import rank_batch_counts, trimmed_batches
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.sizes import channel_counts, token_bytes
from windpipe.services.planning.streams import Streams
from windpipe.services.planning.working_set import (
    ChunkTable,
    protocol_row_bytes,
    run_chunk_bytes,
    working_set_bytes,
)

__all__ = ["PADDING_WARNING_SHARE", "padding_warnings", "plan_report", "shuffle_quality"]

PADDING_WARNING_SHARE = 0.5  # a protocol whose tokens are more than half padding is warned of


def _real_rows(streams: Streams, schedule: Schedule, seq_len: np.ndarray,
               lacking: np.ndarray) -> np.ndarray:
    """Mask-true positions of each lane: ``min(T, N-1-o)`` for real lanes of streams that
    have their protocol's targets, else 0 (padding; SEMANTICS 5a: a stream lacking a
    target column has its mask all False)."""
    off = schedule.lane_offset
    if not off.shape[0]:
        return np.zeros(0, np.int64)
    s = np.maximum(schedule.lane_stream, 0)
    real = (off >= 0) & ~lacking[s]
    return np.where(real, np.minimum(seq_len, streams.n_rows[s] - 1 - off), 0)


def shuffle_quality(streams: Streams, schedule: Schedule) -> float | None:
    """How well ``schedule`` mixes its lanes (SEMANTICS 7), in 0..1: the mean absolute
    source-rank gap between consecutive real lanes in global order over ``(n + 1) / 3``,
    a uniformly random order's; None with fewer than two lanes or for an aligned plan."""
    if schedule.parts > 1:
        return None
    real = (schedule.lane_offset >= 0) & (schedule.lane_stream >= 0)
    pos = streams.stream_base[schedule.lane_stream[real]] + schedule.lane_offset[real]
    n = int(pos.shape[0])
    if n < 2:
        return None
    rank = np.unique(pos, return_inverse=True)[1].astype(np.int64)
    gap = float(np.abs(np.diff(rank)).mean())
    return round(min(1.0, gap / ((n + 1) / 3.0)), 4)


def _blocks(streams: Streams, spec: PlanSpec, schedule: Schedule,
            chunks: ChunkTable) -> ShuffleBlocksReport | None:
    """A block shuffle's budget, blocks and the most chunk bytes one block reads."""
    if schedule.batch_block is None or spec.shuffle_block_bytes is None:
        return None
    per_block = run_chunk_bytes(streams, chunks, schedule, schedule.batch_block)
    return ShuffleBlocksReport(
        budget_bytes=spec.shuffle_block_bytes,
        blocks=int(np.unique(schedule.batch_block).shape[0]),
        working_set_bytes=int(per_block.max()) if per_block.shape[0] else 0,
    )


def padding_warnings(protocols: dict[str, ProtocolReport], streams: Streams, *,
                     aligned: bool) -> list[ReportWarning]:
    """A warning per protocol whose tokens are more than :data:`PADDING_WARNING_SHARE`
    padding (no real target: past a stream's end, padding lanes, a missing target
    column, or, aligned, keys without data of the protocol), saying what to change."""
    out: list[ReportWarning] = []
    for code, (p, r) in enumerate(protocols.items()):
        if r.tokens <= 0 or r.real_tokens >= r.tokens * (1.0 - PADDING_WARNING_SHARE):
            continue
        share = 1.0 - r.real_tokens / r.tokens
        rows = streams.n_rows[streams.protocol == code]
        median = int(np.median(rows)) if rows.shape[0] else 0
        if median <= r.seq_len:
            change = (f"windows of {r.seq_len} steps are longer than most of its streams "
                      f"(median {median:,} rows): a shorter seq_len (window_by_protocol) "
                      "wastes less")
        else:
            change = (f"its streams (median {median:,} rows) end inside windows of "
                      f"{r.seq_len} steps or leave lanes of the batch of {r.batch_size} "
                      "empty: a shorter seq_len or batch_size wastes less")
        if aligned:
            change = f"keys without {p} data are padding lanes in {p}; {change}"
        out.append(ReportWarning(
            type="padding", protocol=p, share=round(share, 4),
            message=(f"{p}: {share:.0%} of the batches' tokens are padding "
                     f"({r.real_tokens:,} of {r.tokens:,} have a real target); {change}"),
        ))
    return out


def plan_report(
    streams: Streams,
    spec: PlanSpec,
    schedule: Schedule,
    *,
    world_size: int = 1,
    chunks: ChunkTable | None = None,
    channels: np.ndarray | None = None,
) -> PlanReportData:
    """Batches, lanes, tokens, bytes and drops of ``schedule`` for ``world_size`` ranks.

    ``chunks``: the plan's chunk layout, for ``cache_working_set_bytes``
    (:mod:`windpipe.services.planning.working_set`; default: each piece one chunk). ``channels``:
    which streams have which of ``spec.columns()``
    (:func:`windpipe.services.planning.channels.stream_channels`; None: every stream has all).
    """
    names = streams.protocols
    lanes_per_batch = schedule.batch_lanes
    lane_batch = np.repeat(np.arange(schedule.n_batches), lanes_per_batch)
    lane_t = schedule.batch_seq_len.astype(np.int64)[lane_batch]
    real = _real_rows(streams, schedule, lane_t, lacks_target(streams, spec, channels))
    counts_of = {p: channel_counts(spec, p) for p in names}
    per_token = np.asarray([token_bytes(*counts_of[p]) for p in names], dtype=np.int64)
    if chunks is None:
        chunks = ChunkTable.whole_pieces(streams,
                                         row_bytes=protocol_row_bytes(spec, names))
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
        c_in, c_out = counts_of[p]
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
    return PlanReportData(
        epoch=int(schedule.epoch),
        strategy=spec.strategy,
        epoch_dependent=spec.strategy != "sequential",
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
        cache_working_set_bytes=working_set_bytes(streams, chunks, schedule),
        shuffle_blocks=_blocks(streams, spec, schedule, chunks),
        shuffle_quality=shuffle_quality(streams, schedule),
        warnings=padding_warnings(protocols, streams, aligned=parts > 1),
    )
