"""Full windows straight from a block: one copy per batch and O(1) Python work per batch.

The general builder (:mod:`.builder`) plans every ``(lane, chunk)`` range of a batch,
pins its blocks in the cache, gathers, works out padding and puts the batch together;
in a training process that reads the host's tier that bookkeeping cost more than the
copy itself (~280 of ~350 us per 64 x 1024 batch, issue 24). Most batches need none of
it: every lane is a full window (``T`` input rows and the target row inside its
stream) of the batch's protocol, so the batch is ``vin[rows]`` and ``vtg[rows]`` of the
block's strided window views (:meth:`~services.materialize.tier.Block.views`): each
window one contiguous run per matrix, every byte of the batch written once.

:class:`WindowPass` decides, for a whole pass at once (vectorized), which batches are
like that and where each lane's window starts in its block; :meth:`WindowPass.build`
then makes such a batch with a few numpy calls whatever its lane count, and answers
None for any other batch (padding, lanes that end early, a stream lacking a target
column, aligned parts, lanes of several protocols), which the general builder makes.
The values are the general builder's, byte for byte: the same block, the same rows,
the same ``has_channel`` rows, the same (lazily computed) provenance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from services.contract.wire import BatchMetadata
from services.materialize.assembler import BuiltBatch
from services.materialize.blocks import BlockLayout
from services.materialize.lanes import block_lanes
from services.materialize.plan import PlanContext
from services.materialize.plan_tables import PlanTables
from services.materialize.tier import Block
from services.planning.schedule import Schedule

__all__ = ["SEGMENT_BATCHES", "Provenance", "WindowPass"]

_I64 = np.int64
SEGMENT_BATCHES = 256  # batches whose lane tables are computed together
# (lane_stream, offsets, lane_protocol, seq_len per lane, lane_key) -> the provenance columns
Provenance = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"],
                      pa.RecordBatch]


@dataclass(frozen=True, slots=True, eq=False)
class _LazyProvenance:
    """A batch's provenance columns, computed when ``Batch.state`` is first read."""

    make: Provenance
    stream: np.ndarray
    offset: np.ndarray
    protocol: np.ndarray
    seq_len: int
    key: np.ndarray | None

    def __call__(self) -> pa.RecordBatch:
        seq = np.full(self.stream.shape[0], self.seq_len, dtype=_I64)
        return self.make(self.stream, self.offset, self.protocol, seq, self.key)


class WindowPass:
    """The batches ``start..end`` of a pass that are full windows of one protocol.

    ``batches`` maps pass positions to global batches of ``schedule``; ``block`` gives
    the loaded block of a protocol code (None: not available here, the general
    builder then reads the batch); ``provenance`` computes a batch's provenance columns
    (the assembler's, so both paths agree). The lane tables are computed for
    :data:`SEGMENT_BATCHES` batches at a time, so a long pass holds no second copy of
    its schedule.
    """

    def __init__(self, plan: PlanContext, tables: PlanTables, layouts: tuple[BlockLayout, ...],
                 schedule: Schedule, batches: np.ndarray, *, start: int, end: int,
                 block: Callable[[int], Block | None], provenance: Provenance) -> None:
        self._plan = plan
        self._n_rows = tables.n_rows
        self._row0 = (np.stack([x.row0 for x in layouts]) if layouts
                      else np.zeros((1, plan.streams.n_rows.shape[0]), dtype=_I64))
        self._schedule = schedule
        self._batches = batches
        self._end = end
        self._block = block
        self._provenance = provenance
        self._aligned = schedule.parts > 1  # parts carry per-part metadata: general builder
        # one has_channel row per protocol when no stream lacks a column (else per lane)
        self._same_channels = len(plan.variants) == len(plan.specs)
        self._views: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._seg = _Segment.empty(start)

    def build(self, i: int) -> BuiltBatch | None:
        """Pass position ``i`` as a built batch, or None when the general builder must."""
        if self._aligned:
            return None
        seg = self._seg
        k = i - seg.start
        if not 0 <= k < seg.n:
            seg = self._seg = self._segment(i)
            k = 0
        if not seg.ok[k]:
            return None
        code, t = seg.code[k], seg.seq[k]
        if (code, t) not in self._views:
            block = self._block(code)
            self._views[(code, t)] = None if block is None else block.views(t)
        views = self._views[(code, t)]
        if views is None:
            return None
        lo, hi = seg.ptr[k], seg.ptr[k + 1]
        n = hi - lo
        plan = self._plan
        spec = plan.specs[code]
        stream = seg.stream[lo:hi]
        if self._same_channels:
            has_channel = np.repeat(plan.channel_rows[code][code][None, :], n, axis=0)
        else:
            has_channel = plan.channel_rows[code][plan.stream_variant[stream]]
        group = seg.group[k]
        stateful = group >= 0
        meta = BatchMetadata(
            batch_idx=i, global_batch=seg.g[k], split=plan.spec.split, seq_len=t,
            c_in=len(spec.input_columns), c_out=len(spec.target_columns),
            input_columns=spec.input_columns, target_columns=spec.target_columns,
            channels=spec.channels, stateful_group_idx=group if stateful else None,
            stateful_step_idx=seg.step[k] if stateful else None,
            stateful_steps=seg.steps[k] if stateful else None,
        )
        key = None if seg.key is None else seg.key[lo:hi]
        provenance = _LazyProvenance(self._provenance, stream, seg.offset[lo:hi],
                                     seg.protocol[lo:hi], t, key)
        rows = seg.rows[lo:hi]
        vin, vtg = views
        return BuiltBatch(inputs=vin[rows], targets=vtg[rows],
                          mask=np.ones((n, t), dtype=np.uint8), has_channel=has_channel,
                          provenance=provenance, provenance_bytes=0, meta=meta)

    def _segment(self, i: int) -> _Segment:
        """The lane tables of positions ``i..`` (at most :data:`SEGMENT_BATCHES`), vectorized."""
        schedule = self._schedule
        gs = np.asarray(self._batches[i : min(self._end, i + SEGMENT_BATCHES)], dtype=_I64)
        _, counts, ptr, idx = block_lanes(schedule, gs)
        seq = schedule.batch_seq_len[gs].astype(_I64)
        code = schedule.batch_protocol[gs].astype(_I64)
        stream = schedule.lane_stream[idx].astype(_I64, copy=False)
        offset = schedule.lane_offset[idx].astype(_I64, copy=False)
        protocol = schedule.lane_protocol[idx]
        real = np.maximum(stream, 0)
        full = ((offset >= 0) & (stream >= 0) & (protocol == np.repeat(code, counts))
                & (self._n_rows[real] - offset >= np.repeat(seq, counts) + 1)
                & ~self._plan.target_missing[real])
        lane_code = np.where(full, protocol, 0).astype(_I64)
        rows = np.where(full, self._row0[lane_code, real] + offset, -1)
        bad = np.concatenate([[0], np.cumsum(~full)])
        ok = (counts > 0) & (bad[ptr[1:]] == bad[ptr[:-1]])
        return _Segment(
            start=i, n=int(gs.shape[0]), ok=ok.tolist(), ptr=ptr.tolist(), g=gs.tolist(),
            seq=seq.tolist(), code=code.tolist(), group=schedule.batch_group[gs].tolist(),
            step=schedule.batch_step[gs].tolist(), steps=schedule.batch_steps[gs].tolist(),
            rows=rows, stream=stream, offset=offset, protocol=protocol,
            key=None if schedule.lane_key is None else schedule.lane_key[idx],
        )


@dataclass(frozen=True, slots=True, eq=False)
class _Segment:
    """The lane tables of :data:`SEGMENT_BATCHES` consecutive pass positions from ``start``:
    per batch (Python lists, read once each) and per lane (numpy, sliced per batch)."""

    start: int
    n: int
    ok: list[bool]  # every lane a full window of the batch's protocol
    ptr: list[int]  # batch k's lanes: [ptr[k], ptr[k+1])
    g: list[int]
    seq: list[int]
    code: list[int]
    group: list[int]
    step: list[int]
    steps: list[int]
    rows: np.ndarray  # block row of each lane's first input row (-1: not a full window)
    stream: np.ndarray
    offset: np.ndarray
    protocol: np.ndarray
    key: np.ndarray | None

    @classmethod
    def empty(cls, start: int) -> _Segment:
        """No positions (the first :meth:`WindowPass.build` computes one)."""
        none = np.empty(0, dtype=_I64)
        return cls(start=start, n=0, ok=[], ptr=[0], g=[], seq=[], code=[], group=[],
                   step=[], steps=[], rows=none, stream=none, offset=none, protocol=none,
                   key=None)
