"""Blocks: every row a plan reads of one protocol, decoded and scaled, as one contiguous
float32 row matrix, so a shuffled batch is one gather of B windows.

A block covers the streams of one protocol code of a plan, laid end to end in stream
order (stream ``s`` starts at block row ``row0[s]``): ``rows (R, C_in + C_out)`` in the
row layout of :mod:`windpipe.services.materialize.rows` (inputs with the ``-2.0`` fill, then
targets with NaN), exactly the rows of the chunks of :mod:`windpipe.services.materialize.chunks`,
which the block is filled from. Its key
digests the storage root, the channel spec (columns and scaling) and every piece's
path and fingerprint, so two plans over the same rows and channels share one block,
and a block is never stale: changed segments have another fingerprint.

The batch builder takes the block path when the blocks of a batch's lanes are in
its cache (``data_access="full_in_mem"`` warms them; a local reader always does):
full lanes are one fancy-index copy of whole windows from the block's window views
(:func:`~services.materialize.rows.window_views`), into the batch's window block; the
few lanes that end early or are padding are written all at once.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from windpipe.services.contract.errors import Unavailable
from windpipe.services.contract.wire import INPUT_PAD
from windpipe.services.materialize.block_fill import Progress, fill_block
from windpipe.services.materialize.cache import ChunkRequest
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.rows import pad_row
from windpipe.services.materialize.tier import Block, Tier, mapping_charge
from windpipe.services.planning.sizes import chunk_row_bytes
from windpipe.services.storage.store import Storage

__all__ = [
    "BlockLayout", "block_key", "block_layouts", "block_request", "gather_lanes", "short_lanes",
]

_I64 = np.int64

@dataclass(frozen=True, eq=False)
class BlockLayout:
    """Where the rows of one protocol's streams sit in its block, and how to fill it."""

    protocol: int  # protocol code (index into ``Streams.protocols``)
    key: str  # content digest: tier file name and cache key
    row0: np.ndarray  # int64 [S]: block row of each stream's first row (-1: other protocol)
    rows: int
    c_in: int
    c_out: int
    chunks: np.ndarray  # int64: indices into the plan's chunk table, in block order
    chunk_row: np.ndarray  # int64: block row of each of those chunks' first row

    @property
    def nbytes(self) -> int:
        """Bytes of the loaded block."""
        return self.rows * chunk_row_bytes(self.c_in, self.c_out)


_LAYOUTS: weakref.WeakKeyDictionary[PlanContext, tuple[BlockLayout, ...]] = (
    weakref.WeakKeyDictionary())


def block_layouts(plan: PlanContext) -> tuple[BlockLayout, ...]:
    """One layout per protocol code of the plan, in code order (computed once per plan)."""
    layouts = _LAYOUTS.get(plan)
    if layouts is None:
        layouts = _LAYOUTS[plan] = _layouts(plan)
    return layouts


def block_key(layout: BlockLayout) -> tuple[str, str]:
    """The chunk cache key of a block."""
    return ("block", layout.key)


def block_request(plan: PlanContext, layout: BlockLayout, *, storage: Storage | None,
                  tier: Tier | None, progress: Progress | None = None,
                  memory: Callable[[int, int], np.ndarray] | None = None) -> ChunkRequest:
    """The cache request of one block: mapped from the tier when some process already
    built it, else decoded from ``storage`` (into the tier when there is one). With a
    tier the cache is charged :func:`~services.materialize.tier.mapping_charge`, not
    the block's bytes. Without one the block is decoded into ``memory(rows, columns)``
    (an uninitialized float32 matrix; default a new one).

    Without ``storage`` (an in-process reader that leaves decoding to its server) a
    block the tier does not hold is ``unavailable``.
    """

    def fill(rows: np.ndarray) -> int:
        if storage is None:
            raise Unavailable(
                f"block {layout.key} of plan {plan.plan_id} is not in the tier (evicted?); "
                "ask the Flight server to warm the plan again",
                details={"plan_id": plan.plan_id, "block": layout.key},
            )
        return fill_block(plan, storage, layout, rows, progress=progress)

    def load() -> tuple[Block, int]:
        if tier is not None:
            return tier.get_or_build(layout.key, rows=layout.rows, c_in=layout.c_in,
                                     c_out=layout.c_out, fill=fill)
        shape = (layout.rows, layout.c_in + layout.c_out)
        rows = np.empty(shape, dtype=np.float32) if memory is None else memory(*shape)
        read = fill(rows)
        return Block(rows=rows, c_in=layout.c_in), read

    # a tier block is a mapped file (its pages are the page cache's): the cache charges
    # the mapping, so a plan larger than the cache is served from the tier
    charge = mapping_charge(layout.nbytes) if tier is not None else layout.nbytes
    return ChunkRequest(key=block_key(layout), nbytes=charge, load=load)


def _layouts(plan: PlanContext) -> tuple[BlockLayout, ...]:
    streams = plan.streams
    piece_stream = streams.piece_stream
    chunk_stream = piece_stream[plan.chunk_piece]
    paths, fingerprints = streams.piece_path, plan.artifact.pieces.fingerprint
    piece_rows = streams.piece_rows.tolist()
    piece_variant = plan.stream_variant[piece_stream]
    out: list[BlockLayout] = []
    for code, spec in enumerate(plan.specs):
        mine = streams.protocol == code
        rows = np.where(mine, streams.n_rows, 0)
        row0 = np.where(mine, np.cumsum(rows) - rows, -1).astype(_I64)
        chunks = np.flatnonzero(mine[chunk_stream]).astype(_I64)
        s = chunk_stream[chunks]
        chunk_row = plan.chunk_gstart[chunks] - streams.stream_base[s] + row0[s]
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"wpblock2\0{plan.root_uri}\0{spec.digest}\0".encode())
        # hashed at once: the same digest as a piece at a time
        pieces = np.flatnonzero(mine[piece_stream])
        text = [f"{paths[p]}\0{fingerprints[p]}\0{piece_rows[p]}\0" for p in pieces.tolist()]
        variants = piece_variant[pieces]
        for k in np.flatnonzero(variants != code).tolist():  # streams lacking columns
            text[k] += f"{plan.variants[int(variants[k])].digest}\0"  # read fewer
        digest.update("".join(text).encode())
        out.append(BlockLayout(
            protocol=code, key=digest.hexdigest(), row0=row0, rows=int(rows.sum()),
            c_in=len(spec.input_columns), c_out=len(spec.target_columns),
            chunks=chunks, chunk_row=chunk_row.astype(_I64),
        ))
    return tuple(out)


def gather_lanes(
    blocks: dict[int, tuple[Block, BlockLayout]], *, lane_stream: np.ndarray,
    lane_offset: np.ndarray, lane_protocol: np.ndarray, n_rows: np.ndarray, seq_len: int,
    c_in: int, take: Callable[[], tuple[np.ndarray, np.ndarray]],
    input_fill: float = INPUT_PAD,
) -> tuple[np.ndarray, np.ndarray]:
    """A batch's lanes from blocks: the window block ``(B, T + 1, C)`` and ``mask (B, T)``.

    ``blocks`` maps each protocol code of the lanes to its loaded block (all of ``c_in``
    input channels: the batch's). When every
    lane is a full window of one protocol (``T`` inputs and the target row inside its
    stream: the common case) the batch is one fancy-index copy into a new array.
    Otherwise the lanes are written into the arrays ``take()`` returns: full lanes one
    copy per protocol, padding lanes (offset -1) and lanes that end early all at once,
    with the padding of SEMANTICS 5 (:func:`~services.materialize.rows.pad_row`; its
    inputs ``input_fill``, the blocks' own fill).
    """
    t = seq_len
    rows = lane_offset.copy()
    avail = np.zeros(rows.shape[0], dtype=_I64)
    for code, (_, layout) in blocks.items():
        mine = (lane_offset >= 0) & (lane_protocol == code)
        rows[mine] += layout.row0[lane_stream[mine]]
        avail[mine] = n_rows[lane_stream[mine]] - lane_offset[mine]
    full = avail >= t + 1
    if len(blocks) == 1 and bool(full.all()):
        block, _ = next(iter(blocks.values()))
        return block.windows(t)[rows], np.ones((rows.shape[0], t), dtype=np.uint8)
    windows, mask = take()
    mask.fill(1)
    for code, (block, _) in blocks.items():
        idx = np.flatnonzero(full & (lane_protocol == code))
        if idx.shape[0]:
            windows[idx] = block.windows(t)[rows[idx]]
    short = np.flatnonzero(~full)
    empty = short[avail[short] <= 0]  # padding lanes (aligned keys without data): at once
    if empty.shape[0]:
        windows[empty] = pad_row(c_in, windows.shape[2] - c_in, input_fill=input_fill)
        mask[empty] = 0
    for code, (block, _) in blocks.items():
        lanes = short[(avail[short] > 0) & (lane_protocol[short] == code)]
        if lanes.shape[0]:
            short_lanes(block, lanes, rows[lanes], avail[lanes], t=t, windows=windows,
                        mask=mask, input_fill=input_fill)
    return windows, mask


def short_lanes(block: Block, lanes: np.ndarray, start: np.ndarray, avail: np.ndarray, *,
                t: int, windows: np.ndarray, mask: np.ndarray,
                input_fill: float = INPUT_PAD) -> None:
    """Lanes ``lanes`` that end early (``avail < T + 1`` rows of their stream from block
    row ``start`` on), all at once: their ``avail`` rows, then pad rows (inputs ``-2.0``,
    or ``input_fill``; targets NaN), and a mask of ``avail - 1`` steps (SEMANTICS 5)."""
    j = np.arange(t + 1, dtype=_I64)
    src = np.minimum(start[:, None] + j, block.rows.shape[0] - 1)  # rows past it: unused
    real = j < avail[:, None]
    pad = pad_row(block.c_in, block.rows.shape[1] - block.c_in, input_fill=input_fill)
    windows[lanes] = np.where(real[..., None], block.rows[src], pad)
    mask[lanes] = real[:, 1:]
