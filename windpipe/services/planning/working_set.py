"""The chunk bytes a batch pins in a Flight server's chunk cache: the one definition.

A real lane at source row ``o`` of a stream of ``N`` rows reads rows
``[o, min(o+T+1, N))`` (T inputs and the target row). A server that reads a batch from
chunks (``windpipe.services.materialize.read_paths.chunks``) pins, all at once, every chunk any
of the batch's lanes reads, each once, for the duration of the copy; a chunk of ``R``
rows of a protocol takes ``R * chunk_row_bytes(C_in, C_out)`` bytes
(:mod:`windpipe.services.planning.sizes`), and empty chunks are never read. Padding lanes read
nothing. An aligned plan's part batches are built, and pinned, one at a time.

:func:`batch_chunk_bytes` is that figure per batch. The plan report's
``cache_working_set_bytes`` is its maximum over the epoch's batches, the catalog
refuses a plan whose figure exceeds the Flight servers' cache budget, and a Flight
server refuses a ticket whose batches do not fit its own budget with the same figure
before it streams anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.sizes import channel_counts, chunk_row_bytes
from windpipe.services.planning.streams import Streams

__all__ = [
    "ChunkTable", "batch_chunk_bytes", "protocol_row_bytes", "run_chunk_bytes",
    "working_set_bytes",
]

_I64 = np.int64


def protocol_row_bytes(spec: PlanSpec, protocols: tuple[str, ...]) -> np.ndarray:
    """Bytes of one cached chunk row of each protocol code (int64 [n_protocols])."""
    return np.asarray([chunk_row_bytes(*channel_counts(spec, p)) for p in protocols],
                      dtype=_I64)


@dataclass(frozen=True, eq=False)
class ChunkTable:
    """Every non-empty chunk of a plan's pieces, laid end to end in stream order: the global
    row of its first row (``gstart``, increasing) and its cached size (``nbytes``)."""

    gstart: np.ndarray  # int64 [NC]
    nbytes: np.ndarray  # int64 [NC]

    @classmethod
    def of(cls, streams: Streams, *, chunk_ptr: np.ndarray, chunk_rows: np.ndarray,
           row_bytes: np.ndarray) -> ChunkTable:
        """The chunks of ``streams``' pieces (CSR ``chunk_rows[chunk_ptr[p]:chunk_ptr[p+1]]``
        per piece), each row taking ``row_bytes[protocol code]``."""
        rows = np.asarray(chunk_rows, dtype=_I64)
        piece, _ = expand_counts(np.diff(np.asarray(chunk_ptr, dtype=_I64)))
        within = np.cumsum(rows) - rows
        piece_first = np.concatenate([[0], np.cumsum(rows)])[np.asarray(chunk_ptr)[:-1]]
        gstart = streams.piece_global_start[piece] + within - piece_first[piece]
        proto = streams.protocol.astype(_I64)[streams.piece_stream[piece]]
        keep = rows > 0
        return cls(gstart=gstart[keep].astype(_I64),
                   nbytes=(rows * row_bytes[proto])[keep].astype(_I64))

    @classmethod
    def whole_pieces(cls, streams: Streams, *, row_bytes: np.ndarray) -> ChunkTable:
        """Each piece read as one chunk (a plan whose chunk layout is not known)."""
        return cls.of(streams, chunk_ptr=np.arange(streams.piece_rows.shape[0] + 1,
                                                   dtype=_I64),
                      chunk_rows=streams.piece_rows, row_bytes=row_bytes)


def batch_chunk_bytes(streams: Streams, chunks: ChunkTable, schedule: Schedule, *,
                      batches: np.ndarray | None = None) -> np.ndarray:
    """The distinct chunk bytes each of ``batches`` (global batch indices of ``schedule``;
    default: all of them) pins, int64 in their order (vectorized over lanes)."""
    gs = (np.arange(schedule.n_batches, dtype=_I64) if batches is None
          else np.asarray(batches, dtype=_I64))
    n = int(gs.shape[0])
    if n == 0 or chunks.gstart.shape[0] == 0:
        return np.zeros(n, dtype=_I64)
    lo = schedule.batch_lane_ptr[gs].astype(_I64)
    counts = schedule.batch_lane_ptr[gs + 1].astype(_I64) - lo
    owner, pos = expand_counts(counts)
    lane = lo[owner] + pos
    off = schedule.lane_offset[lane].astype(_I64)
    real = off >= 0
    owner, lane, off = owner[real], lane[real], off[real]
    s = schedule.lane_stream[lane].astype(_I64)
    t = schedule.batch_seq_len[gs].astype(_I64)[owner]
    base = streams.stream_base[s]
    first = np.searchsorted(chunks.gstart, base + off, side="right") - 1
    end = base + np.minimum(off + t + 1, streams.n_rows[s])  # exclusive
    last = first.copy()  # most lanes end in the chunk they start in
    across = np.flatnonzero(end > np.append(chunks.gstart, end.max(initial=0))[first + 1])
    last[across] = np.searchsorted(chunks.gstart, end[across] - 1, side="right") - 1
    # the union of each batch's chunk ranges [first, last]: in (batch, first) order, a
    # range adds only the chunks past the furthest one an earlier range of its batch read
    span = int(chunks.gstart.shape[0]) + 1
    key = owner * span + first  # lanes come grouped by batch: sort within each only
    if key.shape[0] > 1 and bool((key[1:] < key[:-1]).any()):
        order = np.argsort(key, kind="stable")
        owner, first, last = owner[order], first[order], last[order]
    reach = np.maximum.accumulate(owner * span + last)
    before = np.concatenate([[-1], reach[:-1]]) - owner * span  # < 0 for a batch's first
    begin = np.minimum(np.maximum(first, before + 1), last + 1)
    total = np.concatenate([[0], np.cumsum(chunks.nbytes)]).astype(_I64)
    added = total[last + 1] - total[begin]
    out = np.zeros(n, dtype=_I64)
    np.add.at(out, owner, added)
    return out


def working_set_bytes(streams: Streams, chunks: ChunkTable, schedule: Schedule) -> int:
    """The most chunk bytes any batch of ``schedule`` pins (0 for an empty epoch)."""
    per_batch = batch_chunk_bytes(streams, chunks, schedule)
    return int(per_batch.max()) if per_batch.shape[0] else 0


def run_chunk_bytes(streams: Streams, chunks: ChunkTable, schedule: Schedule,
                    run_of_batch: np.ndarray) -> np.ndarray:
    """The distinct chunk bytes each run of consecutive batches reads, all its batches
    together (``run_of_batch``: a label per batch, equal within a run and changing
    between runs, e.g. a block shuffle's ``batch_block``; one lane length per run)."""
    label = np.asarray(run_of_batch)
    nb = int(label.shape[0])
    if nb == 0:
        return np.zeros(0, dtype=_I64)
    first = np.flatnonzero(np.concatenate([[True], label[1:] != label[:-1]]))
    nr = int(first.shape[0])
    runs = dataclasses.replace(
        schedule,
        batch_lane_ptr=np.append(schedule.batch_lane_ptr[first], schedule.batch_lane_ptr[-1]),
        batch_seq_len=schedule.batch_seq_len[first], batch_unit=np.arange(nr, dtype=_I64),
    )
    return batch_chunk_bytes(streams, chunks, runs)
