"""Windows straight from a block: one copy per batch and O(1) Python work per batch.

The general builder (:mod:`.builder`) plans every ``(lane, chunk)`` range of a batch,
pins its blocks in the cache, gathers, works out padding and puts the batch together;
in a training process that reads the host's tier that bookkeeping cost more than the
copy itself (~280 of ~350 us per 64 x 1024 batch). Most batches need none of
it: every lane is a full window (``T`` input rows and the target row inside its
stream) of the batch's protocol, so the batch is ``windows[rows]`` of the block's
overlapping window views (:meth:`~services.materialize.tier.Block.windows`): each
window one contiguous run of ``T + 1`` rows, every byte of the batch written once, the
inputs and targets views of that one copy (:mod:`windpipe.services.materialize.rows`).

:class:`WindowPass` decides, for :data:`SEGMENT_BATCHES` batches at once (vectorized),
which batches are like that, where each lane's window starts in its block and each
lane's ``has_channel`` row; :meth:`WindowPass.build` then makes such a batch with one
fancy index, one fresh mask and a few constant-size objects whatever its lane count
(about 7 us of Python around the copy). A batch some of whose lanes end early
(a stream's last window, every window of a stream shorter than ``T + 1`` rows: most
of a collection of short segments) takes this path too: every lane's window one copy
from the window views, then the pad row written over the rows past each stream and a
shorter mask (:meth:`WindowPass._with_short_lanes`), into new arrays (a GPU feed's
buffer takes only full-window batches: with it such a batch goes to the general
builder; :class:`~sdk._arrays.AlignedMemory` takes them as new arrays). It answers
None for any other batch (padding lanes, a stream lacking a target column, aligned
parts, lanes of several protocols), which the general builder makes. The values are
the general builder's, byte for byte: the same block, the same rows, the same
``has_channel`` rows, the same (lazily computed) provenance.

What a batch owns (docs/types.md): its window block, ``mask`` and ``has_channel``
are fresh arrays of its own, every time a batch is built (a pass is
built again from the same tables: a slice of a table would hand the same bytes to the
same batch of the next pass, carrying a user's in-place edit into it), so writing into
one batch never changes another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from windpipe.services.contract.wire import INPUT_PAD, BatchMetadata
from windpipe.services.materialize.assembler import BuiltBatch
from windpipe.services.materialize.batch_memory import BatchMemory
from windpipe.services.materialize.blocks import BlockLayout, short_lanes
from windpipe.services.materialize.lanes import block_lanes
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.plan_tables import PlanTables
from windpipe.services.materialize.rows import fill_inputs, pad_row
from windpipe.services.materialize.tier import Block
from windpipe.services.planning.schedule import Schedule

__all__ = ["SEGMENT_BATCHES", "Prepared", "Provenance", "WindowPass"]

_I64 = np.int64
SEGMENT_BATCHES = 256  # batches whose lane tables are computed together
# (lane_stream, offsets, lane_protocol, seq_len per lane, lane_key) -> the provenance columns
Provenance = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"],
                      pa.RecordBatch]
Prepared = Callable[[int], tuple[pa.RecordBatch, int]]  # position -> its columns, their bytes


def _given(value: pa.RecordBatch) -> pa.RecordBatch:
    return value
# BatchMetadata's fields after global_batch: split, seq_len, c_in, c_out, input columns,
# target columns, channels; then stateful group, step, steps (None: not stateful)
_Fields = tuple[str, int, int, int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_Stateful = tuple[int | None, int | None, int | None]
_NOT_STATEFUL: _Stateful = (None, None, None)


@dataclass(frozen=True, slots=True, eq=False)
class _Shape:
    """What every full-window batch of one protocol and length shares: the block's window
    views and the metadata fields after ``global_batch`` up to ``channels``."""

    code: int
    seq_len: int
    block: Block
    windows: np.ndarray  # (R - T, T + 1, C): every window of the block
    fields: _Fields


class WindowPass:
    """The batches ``start..end`` of a pass whose lanes are windows of one protocol, full or
    ending early (the module docstring).

    ``batches`` maps pass positions to global batches of ``schedule``; ``block`` gives
    the loaded block of a protocol code (None: not available here, the general
    builder then reads the batch); ``held(code)``, when given, says whether that block is
    still in its cache (a block held in memory that the cache evicted is not read
    further: the general builder loads it again, within the budget); ``provenance``
    computes a batch's provenance columns (the assembler's, so both paths agree), when
    ``Batch.state`` is first read; ``prepared(i)``, when given (the Flight server, which
    sends them), gives position ``i``'s columns and their bytes at once, from the blocks
    of batches the assembler prepares ahead. The lane tables are computed for
    :data:`SEGMENT_BATCHES` batches at a time, so a long pass holds no second copy of
    its schedule. A pass may be built again from the same object (an in-process reader
    keeps one per epoch and rank): it keeps its block views and its latest segment.
    """

    def __init__(self, plan: PlanContext, tables: PlanTables, layouts: tuple[BlockLayout, ...],
                 schedule: Schedule, batches: np.ndarray, *, start: int, end: int,
                 block: Callable[[int], Block | None], provenance: Provenance,
                 prepared: Prepared | None = None,
                 held: Callable[[int], bool] | None = None) -> None:
        self._plan = plan
        self._n_rows = tables.n_rows
        self._row0 = (np.stack([x.row0 for x in layouts]) if layouts
                      else np.zeros((1, plan.streams.n_rows.shape[0]), dtype=_I64))
        self._schedule = schedule
        self._batches = batches
        self._end = end
        self._block = block
        self._provenance = provenance
        self._prepared = prepared
        self._held = held
        self._aligned = schedule.parts > 1  # parts carry per-part metadata: general builder
        self._input_valid = plan.input_valid
        self._input_fill = plan.specs[0].input_fill if plan.specs else INPUT_PAD
        # one has_channel row per protocol when no stream lacks a column (else per lane)
        self._same_channels = len(plan.variants) == len(plan.specs)
        self._shapes: dict[tuple[int, int], _Shape | None] = {}
        self._seg = _Segment.empty(start)

    def build(self, i: int, *, memory: BatchMemory | None = None) -> BuiltBatch | None:
        """Pass position ``i`` as a built batch, or None when the general builder must;
        its arrays new ones, or written into ``memory`` (a GPU feed's page-locked buffer)."""
        if self._aligned:
            return None
        seg = self._seg
        k = i - seg.start
        if not 0 <= k < seg.n:
            seg = self._seg = self._segment(i)
            k = 0
        shape = seg.shape[k]
        if shape is None or (self._held is not None and not self._held(shape.code)):
            return None
        lo, hi = seg.ptr[k], seg.ptr[k + 1]
        rows = seg.rows[lo:hi]
        t = shape.seq_len
        channels = seg.channels[shape.code][lo:hi]
        short = seg.short[k]
        if short and memory is not None and not memory.short_lanes:
            return None  # a GPU feed's buffer takes full windows (the general builder pads)
        if short:
            windows, mask = self._with_short_lanes(shape, seg, lo, hi,
                                                   input_fill=self._input_fill)
            has_channel = channels.copy()
        elif memory is None:
            windows = shape.windows[rows]
            # fresh per batch: a shared mask would carry one batch's edits to the next
            mask = np.ones((hi - lo, t), dtype=np.uint8)
            has_channel = channels.copy()
        else:
            windows = memory.gather(shape.windows, rows)
            mask = memory.empty((hi - lo, t), np.uint8)
            mask.fill(1)
            has_channel = memory.empty(channels.shape, np.uint8)
            np.copyto(has_channel, channels)
        # fresh memory, not the feed's buffer: the device loader copies it on as it is
        input_valid = fill_inputs(windows, shape.fields[2]) if self._input_valid else None
        if self._prepared is None:
            provenance: Callable[[], pa.RecordBatch] = functools.partial(
                self._lane_provenance, seg, lo, hi, t)
            nbytes = 0
        else:
            prov, nbytes = self._prepared(i)
            provenance = functools.partial(_given, prov)
        return BuiltBatch(
            windows, mask, has_channel, provenance, nbytes,
            BatchMetadata(i, seg.g[k], *shape.fields, *seg.stateful[k]), input_valid,
        )

    @staticmethod
    def _with_short_lanes(shape: _Shape, seg: _Segment, lo: int, hi: int, *,
                          input_fill: float) -> tuple[np.ndarray, np.ndarray]:
        """A batch some of whose lanes end early: full lanes one copy, the others their rows
        then padding and a shorter mask (SEMANTICS 5), as the general builder writes them
        (:func:`~services.materialize.blocks.gather_lanes`).

        Every lane's ``T + 1`` rows are one copy from the window views (a short lane's
        rows past its stream are the block's next ones), then each short lane's rows
        from its end on are overwritten with the pad row and its mask cleared from there,
        a slice each (a batch has few short lanes: 4x faster than a boolean mask over
        every step). A lane too near the block's end for a whole window takes
        :func:`~services.materialize.blocks.short_lanes`."""
        t = shape.seq_len
        rows, avail = seg.rows[lo:hi], seg.avail[lo:hi]
        if rows.shape[0] and int(rows.max()) < shape.windows.shape[0]:
            windows = shape.windows[rows]
            mask = np.ones((hi - lo, t), dtype=np.uint8)
            pad = pad_row(shape.block.c_in, windows.shape[2] - shape.block.c_in,
                          input_fill=input_fill)
            short = np.flatnonzero(avail < t + 1)
            for lane, end in zip(short.tolist(), avail[short].tolist(), strict=True):
                windows[lane, max(end, 0):] = pad
                mask[lane, max(end - 1, 0):] = 0  # step j predicts row j + 1
            return windows, mask
        windows = np.empty((hi - lo, t + 1, shape.windows.shape[2]), dtype=np.float32)
        mask = np.ones((hi - lo, t), dtype=np.uint8)
        ends = avail < t + 1
        full = np.flatnonzero(~ends)
        if full.shape[0]:
            windows[full] = shape.windows[rows[full]]
        lanes = np.flatnonzero(ends)
        short_lanes(shape.block, lanes, rows[lanes], avail[lanes], t=t, windows=windows,
                    mask=mask, input_fill=input_fill)
        return windows, mask

    def _lane_provenance(self, seg: _Segment, lo: int, hi: int, t: int) -> pa.RecordBatch:
        """The provenance columns of lanes ``lo..hi`` of ``seg`` (when ``Batch.state`` is
        first read)."""
        return self._provenance(seg.stream[lo:hi], seg.offset[lo:hi], seg.protocol[lo:hi],
                                np.full(hi - lo, t, dtype=_I64),
                                None if seg.key is None else seg.key[lo:hi])

    def _shape(self, code: int, t: int) -> _Shape | None:
        """The shared part of protocol ``code``'s batches of ``t`` steps (None: its block is
        not available here; kept, so this pass's batches of it take the general builder
        from then on, which reports why)."""
        key = (code, t)
        if key not in self._shapes:
            block = self._block(code)
            spec, plan = self._plan.specs[code], self._plan
            self._shapes[key] = None if block is None else _Shape(
                code, t, block, block.windows(t),
                fields=(plan.spec.split, t, len(spec.input_columns), len(spec.target_columns),
                        spec.input_columns, spec.target_columns, spec.channels))
        return self._shapes[key]

    def _segment(self, i: int) -> _Segment:
        """The lane tables of positions ``i..`` (at most :data:`SEGMENT_BATCHES`), vectorized."""
        schedule, plan = self._schedule, self._plan
        gs = np.asarray(self._batches[i : min(self._end, i + SEGMENT_BATCHES)], dtype=_I64)
        _, counts, ptr, idx = block_lanes(schedule, gs)
        seq = schedule.batch_seq_len[gs].astype(_I64)
        code = schedule.batch_protocol[gs].astype(_I64)
        stream = schedule.lane_stream[idx].astype(_I64, copy=False)
        offset = schedule.lane_offset[idx].astype(_I64, copy=False)
        protocol = schedule.lane_protocol[idx]
        real = np.maximum(stream, 0)
        avail = self._n_rows[real] - offset
        # a lane of the batch's protocol with rows from its offset on: a full window, or
        # one that ends early (padded as the general builder pads it)
        fits = ((offset >= 0) & (stream >= 0) & (protocol == np.repeat(code, counts))
                & (avail >= 1) & ~plan.target_missing[real])
        ends = fits & (avail < np.repeat(seq, counts) + 1)
        lane_code = np.where(fits, protocol, 0).astype(_I64)
        rows = np.where(fits, self._row0[lane_code, real] + offset, -1)
        bad = np.concatenate([[0], np.cumsum(~fits)])
        ok = ((counts > 0) & (bad[ptr[1:]] == bad[ptr[:-1]])).tolist()
        early = np.concatenate([[0], np.cumsum(ends)])
        short = (early[ptr[1:]] != early[ptr[:-1]]).tolist()
        shapes = [self._shape(c, t) if good else None
                  for good, c, t in zip(ok, code.tolist(), seq.tolist(), strict=True)]
        channels = {}  # each lane's has_channel row, per protocol code (copied per batch)
        for c in {s.code for s in shapes if s is not None}:
            table = plan.channel_rows[c]
            channels[c] = (np.repeat(table[c][None, :], stream.shape[0], axis=0)
                           if self._same_channels else table[plan.stream_variant[real]])
        group = schedule.batch_group[gs].tolist()
        step, steps = schedule.batch_step[gs].tolist(), schedule.batch_steps[gs].tolist()
        return _Segment(
            start=i, n=int(gs.shape[0]), shape=shapes, ptr=ptr.tolist(), g=gs.tolist(),
            stateful=[(x, y, z) if x >= 0 else _NOT_STATEFUL
                      for x, y, z in zip(group, step, steps, strict=True)],
            rows=rows, channels=channels, stream=stream, offset=offset, protocol=protocol,
            key=None if schedule.lane_key is None else schedule.lane_key[idx],
            short=short, avail=avail,
        )


@dataclass(frozen=True, slots=True, eq=False)
class _Segment:
    """The lane tables of :data:`SEGMENT_BATCHES` consecutive pass positions from ``start``:
    per batch (Python lists, read once each) and per lane (numpy, sliced per batch)."""

    start: int
    n: int
    shape: list[_Shape | None]  # None: not every lane a full window of the batch's protocol
    ptr: list[int]  # batch k's lanes: [ptr[k], ptr[k+1])
    g: list[int]
    stateful: list[_Stateful]
    rows: np.ndarray  # block row of each lane's first input row (-1: not a full window)
    channels: dict[int, np.ndarray]  # code -> uint8 [lanes, C]: has_channel rows to copy
    stream: np.ndarray
    offset: np.ndarray
    protocol: np.ndarray
    key: np.ndarray | None
    short: list[bool]  # per batch: some lane ends early
    avail: np.ndarray  # rows of each lane's stream from its offset on

    @classmethod
    def empty(cls, start: int) -> _Segment:
        """No positions (the first :meth:`WindowPass.build` computes one)."""
        none = np.empty(0, dtype=_I64)
        return cls(start=start, n=0, shape=[], ptr=[0], g=[], stateful=[], rows=none,
                   channels={}, stream=none, offset=none, protocol=none, key=None,
                   short=[], avail=none)
