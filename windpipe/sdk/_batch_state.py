"""``BatchState`` and ``BatchSegmentRef``: a batch's provenance, read from the wire.

The provenance columns of a wire record batch (``windpipe/services/contract/wire.py``: protocol,
manifest rows, group and alignment keys, window offsets, the segment ranges read)
become a :class:`BatchState` on the CPU, when ``Batch.state`` is first read.
:mod:`windpipe.sdk._batch` re-exports both classes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from windpipe.services.arrow_values import to_numpy
from windpipe.services.contract.wire import BatchMetadata

__all__ = ["BatchSegmentRef", "BatchState", "batch_state", "list_values"]


@dataclass(frozen=True, slots=True)
class BatchSegmentRef:
    """One (lane, segment) range a batch read (SEMANTICS section 8).

    ``row_start``/``row_count``: the rows read from the segment at ``path`` (the
    extra target row included); ``window_row_start``/``window_row_count``: where those
    rows sit, counted from the lane's first input row.
    """

    lane: int
    path: str
    row_start: int
    row_count: int
    window_row_start: int
    window_row_count: int


@dataclass(frozen=True, slots=True)
class BatchState:
    """Provenance of one batch; stays on the CPU. Lane-aligned tuples have length B.

    ``window_offsets[b]`` is the source row of lane b's first input (-1 for a padded
    lane). The ``stateful_*`` fields are set only on batches of a stateful group
    (SEMANTICS section 4): reset recurrent state where ``stateful_step_idx == 0``.
    """

    split: str
    batch_idx: int
    protocols: tuple[str, ...]
    manifest_paths: tuple[str, ...]
    manifest_row_ids: tuple[int, ...]
    group_keys: tuple[tuple[Any, ...], ...]
    alignment_keys: tuple[tuple[Any, ...], ...]
    window_offsets: tuple[int, ...]
    segments: tuple[BatchSegmentRef, ...] = ()
    stateful_group_idx: int | None = None
    stateful_step_idx: int | None = None
    stateful_steps: int | None = None
    global_batch: int | None = field(default=None, compare=False)
    input_columns: tuple[str, ...] = field(default=(), compare=False)
    target_columns: tuple[str, ...] = field(default=(), compare=False)
    skipped_lanes: tuple[dict[str, Any], ...] = field(default=(), compare=False)

    def segments_of(self, lane: int) -> tuple[BatchSegmentRef, ...]:
        """The segment ranges lane ``lane`` read, in window order."""
        return tuple(s for s in self.segments if s.lane == lane)


def list_values(column: pa.Array) -> pa.Array:
    """The values of a list column covered by its (possibly sliced) offsets."""
    arr: Any = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(arr) == 0:
        return arr.values.slice(0, 0)
    offsets = arr.offsets
    start, stop = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
    return arr.values.slice(start, stop - start)


@functools.lru_cache(maxsize=1 << 16)
def _key(text: str) -> tuple[Any, ...]:
    if not text:  # an aligned lane whose key has no data of its protocol: no group key
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return (text,)
    return tuple(value) if isinstance(value, list) else (value,)


def _segments(batch: pa.RecordBatch) -> tuple[BatchSegmentRef, ...]:
    paths = batch.column("seg_path")
    lens = to_numpy(paths.value_lengths())
    flat = [
        list_values(batch.column(name)).to_pylist()
        for name in ("seg_path", "seg_row_start", "seg_row_count", "seg_window_row_start",
                     "seg_window_row_count")
    ]
    lanes = [lane for lane, n in enumerate(lens.tolist()) for _ in range(int(n or 0))]
    return tuple(
        BatchSegmentRef(lane, p, rs, rc, ws, wc)
        for lane, p, rs, rc, ws, wc in zip(lanes, *flat, strict=True)
    )


def batch_state(batch: pa.RecordBatch, meta: BatchMetadata) -> BatchState:
    """The provenance of a wire record batch (or of its provenance columns alone)."""
    return BatchState(
        split=meta.split,
        batch_idx=meta.batch_idx,
        protocols=tuple(batch.column("protocol").to_pylist()),
        manifest_paths=tuple(batch.column("manifest_path").to_pylist()),
        manifest_row_ids=tuple(batch.column("manifest_row_id").to_pylist()),
        group_keys=tuple(_key(k) for k in batch.column("group_key").to_pylist()),
        alignment_keys=tuple(_key(k) for k in batch.column("alignment_key").to_pylist()),
        window_offsets=tuple(batch.column("window_offset").to_pylist()),
        segments=_segments(batch),
        stateful_group_idx=meta.stateful_group_idx,
        stateful_step_idx=meta.stateful_step_idx,
        stateful_steps=meta.stateful_steps,
        global_batch=meta.global_batch,
        input_columns=meta.input_columns,
        target_columns=meta.target_columns,
        skipped_lanes=meta.skipped_lanes,
    )
