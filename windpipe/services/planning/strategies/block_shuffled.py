"""``block_shuffled``: a shuffle whose working set fits a byte budget (SEMANTICS 3c).

Data larger than memory cannot be shuffled globally without reading every chunk for
every batch. This strategy groups the plan's storage chunks (the unit the chunk cache
decodes and holds, :mod:`windpipe.services.planning.working_set`) into blocks whose decoded
bytes, with the rows their windows read past them, fit ``shuffle_block_bytes``; each
epoch permutes the blocks and the windows within each block, and cuts every block into
batches of its own, so a reader needs one block's chunks at a time. The draws are the
contract's (``docs/semantics-notes.md``):

- phase: the same as ``shuffled`` (:func:`~services.planning.strategies.shuffled.epoch_phases`);
- blocks: ``rng_for("blocks", seed, epoch).permutation(n_blocks)``;
- windows within a block: ascending ``rng_for("block-windows", seed, epoch).random(n)``
  drawn over the epoch's windows in source order.

The blocks themselves depend on the plan only (chunk layout, ``seq_len``, budget), never
on the epoch. Everything is vectorized except one step per block when blocks are formed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from windpipe.services.contract.errors import InternalError, InvalidConfig
from windpipe.services.contract.identity import rng_for
from windpipe.services.planning.groups import Segments, segmented_schedule
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.strategies.shuffled import epoch_phases
from windpipe.services.planning.streams import Streams
from windpipe.services.planning.working_set import ChunkTable

__all__ = ["ShuffleBlocks", "schedule", "shuffle_blocks"]

_I64 = np.int64


@dataclass(frozen=True, eq=False)
class ShuffleBlocks:
    """A plan's shuffle blocks: the block of every chunk of its chunk table (-1: a chunk
    of a stream too short for a window) and each block's footprint bytes."""

    gstart: np.ndarray  # int64 [NC]: the chunk table's first global row of each chunk
    chunk_block: np.ndarray  # int64 [NC]
    footprint: np.ndarray  # int64 [n_blocks]

    @property
    def count(self) -> int:
        """Number of blocks."""
        return int(self.footprint.shape[0])

    def block_of(self, global_rows: np.ndarray) -> np.ndarray:
        """The block of the chunk holding each global row (a window's first input row)."""
        chunk = np.searchsorted(self.gstart, np.asarray(global_rows, dtype=_I64),
                                side="right") - 1
        return self.chunk_block[chunk]


def _reach(streams: Streams, windows: WindowTable,
           chunks: ChunkTable) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk: its stream, and the last chunk a window starting in it may read (its
    last row plus T, capped at the stream's last row)."""
    base = streams.stream_base
    stream = np.searchsorted(base, chunks.gstart, side="right") - 1
    end = np.minimum(np.append(chunks.gstart[1:], base[-1]), base[stream + 1])
    t = windows.seq_len[streams.protocol[stream].astype(_I64)]
    last_row = np.minimum(end - 1 + t, base[stream + 1] - 1)
    return stream, np.searchsorted(chunks.gstart, last_row, side="right") - 1


def shuffle_blocks(streams: Streams, windows: WindowTable, chunks: ChunkTable, *,
                   budget: int) -> ShuffleBlocks:
    """The blocks of SEMANTICS 3c: per protocol, consecutive chunks taken greedily while
    their footprint fits ``budget``; ``invalid_config`` when one chunk's own does not."""
    nc = int(chunks.gstart.shape[0])
    chunk_block = np.full(nc, -1, dtype=_I64)
    stream, reach = _reach(streams, windows, chunks) if nc else (
        np.zeros(0, _I64), np.zeros(0, _I64))
    useful = streams.n_rows[stream] >= 2
    proto = streams.protocol[stream].astype(_I64)
    # per protocol: (code, its chunks, their cumulative bytes, footprint end per last chunk)
    plans: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    for code in range(len(streams.protocols)):
        idx = np.flatnonzero(useful & (proto == code))
        if idx.shape[0] == 0:
            continue
        local_reach = np.searchsorted(idx, reach[idx])  # the same stream: in ``idx``
        cum = np.concatenate([[0], np.cumsum(chunks.nbytes[idx])]).astype(_I64)
        ends = cum[local_reach + 1]  # footprint end of a block whose last chunk is j
        plans.append((code, idx, cum, ends))
    need = max((int((ends - cum[:-1]).max()) for _, _, cum, ends in plans), default=0)
    if need > budget:
        code, idx, cum, ends = max(plans, key=lambda p: int((p[3] - p[2][:-1]).max()))
        worst = int(np.argmax(ends - cum[:-1]))
        s = int(stream[idx[worst]])
        raise InvalidConfig(
            f"shuffle_block_bytes={budget:,} cannot hold one chunk of "
            f"{streams.protocols[code]!r} with the rows its windows read past it "
            f"({int(ends[worst] - cum[worst]):,} bytes, stream {s}, row "
            f"{int(chunks.gstart[idx[worst]] - streams.stream_base[s])}); the smallest "
            f"workable shuffle_block_bytes for this plan is {need:,}",
            details={"shuffle_block_bytes": budget, "min_shuffle_block_bytes": need,
                     "protocol": streams.protocols[code], "stream": s},
        )
    members: list[np.ndarray] = []
    sizes: list[int] = []
    for _code, idx, cum, ends in plans:
        a = 0
        while a < idx.shape[0]:  # one step per block: the greedy cut is sequential
            b = int(np.searchsorted(ends, cum[a] + budget, side="right"))
            members.append(idx[a:b])
            sizes.append(int(ends[b - 1] - cum[a]))
            a = b
    order = np.argsort([int(m[0]) for m in members], kind="stable").astype(_I64)
    for number, k in enumerate(order.tolist()):
        chunk_block[members[k]] = number
    footprint = np.asarray(sizes, dtype=_I64)[order] if sizes else np.zeros(0, _I64)
    return ShuffleBlocks(gstart=chunks.gstart, chunk_block=chunk_block, footprint=footprint)


def _groups(segments: Segments, *, streams: Streams, blocks: ShuffleBlocks, seed: int,
            epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Blocks permuted, windows permuted within each, each block cut into groups of B."""
    pos = streams.stream_base[segments.stream] + segments.offset
    n = int(pos.shape[0])
    if n == 0:
        return np.zeros(0, _I64), np.zeros(0, _I64)
    src = np.argsort(pos, kind="stable")  # source order: stream index, then offset
    src_rank = np.empty(n, dtype=_I64)
    src_rank[src] = np.arange(n, dtype=_I64)
    u = rng_for("block-windows", seed, epoch).random(n)[src_rank]
    block = blocks.block_of(pos)
    at = np.empty(blocks.count, dtype=_I64)
    at[rng_for("blocks", seed, epoch).permutation(blocks.count)] = np.arange(
        blocks.count, dtype=_I64)
    order = np.lexsort((src_rank, u, at[block]))
    blk = block[order]
    first = np.ones(n, dtype=bool)
    first[1:] = blk[1:] != blk[:-1]
    run_first = np.flatnonzero(first)
    j = np.arange(n, dtype=_I64) - run_first[np.cumsum(first) - 1]
    return order.astype(_I64), np.flatnonzero(j % segments.batch_size[order] == 0)


def schedule(streams: Streams, windows: WindowTable, rules: OrderRules, epoch: int, *,
             chunks: ChunkTable | None = None) -> Schedule:
    """The batches of ``epoch``, each within one block; ``batch_block`` names it."""
    if rules.shuffle_block_bytes is None or chunks is None:
        raise InternalError("block_shuffled needs shuffle_block_bytes and the chunk layout")
    blocks = shuffle_blocks(streams, windows, chunks, budget=rules.shuffle_block_bytes)

    def form_groups(segments: Segments) -> tuple[np.ndarray, np.ndarray]:
        return _groups(segments, streams=streams, blocks=blocks, seed=rules.seed, epoch=epoch)

    out = segmented_schedule(streams, windows, rules, epoch=epoch,
                             phase=epoch_phases(streams, windows, rules, epoch),
                             form_groups=form_groups)
    lane0 = out.batch_lane_ptr[:-1]
    first_row = streams.stream_base[out.lane_stream[lane0]] + out.lane_offset[lane0]
    return dataclasses.replace(out, batch_block=blocks.block_of(first_row).astype(_I64))
