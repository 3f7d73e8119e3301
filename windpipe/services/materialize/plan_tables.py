"""Per-plan lookup tables of the hot path, built once per plan and shared by every stream."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from windpipe.services.arrow_values import from_numpy, string_array
from windpipe.services.materialize.plan import PlanContext

__all__ = ["PlanTables", "plan_tables", "take_strings"]

_I64 = np.int64
_REPEATS = 4096


@dataclass(frozen=True, eq=False)
class PlanTables:
    """Per-plan lookup tables of the hot path (built once per plan by :func:`plan_tables`)."""

    stream_base: np.ndarray  # int64 [S+1]
    n_rows: np.ndarray  # int64 [S]
    piece_ptr: np.ndarray
    piece_mrid: np.ndarray
    piece_path: pa.Array  # string [P + 1], the last entry ""
    protocol: pa.Array  # string per protocol code
    group_key: pa.Array  # string per stream, then "" (a lane without a stream)
    alignment_key: pa.Array  # string per stream
    key: pa.Array | None  # aligned plans: the alignment key per key (Schedule.lane_key)
    list_offsets: dict[tuple[int, int], pa.Array] = field(default_factory=dict)
    repeats: dict[tuple[str, int, int], pa.Array] = field(default_factory=dict)

    def take(self, name: str, idx: np.ndarray) -> pa.Array:
        """``getattr(self, name).take(idx)``; runs of one value come from a bounded cache
        (a batch's lanes usually share one stream and one piece)."""
        values: pa.Array = getattr(self, name)
        n = int(idx.shape[0])
        if n == 0 or idx[0] != idx[-1] or not (idx == idx[0]).all():
            return take_strings(values, idx)
        key = (name, int(idx[0]), n)
        arr = self.repeats.get(key)
        if arr is None:
            if len(self.repeats) >= _REPEATS:
                self.repeats.clear()
            arr = pa.repeat(values[int(idx[0])], n)
            self.repeats[key] = arr
        return arr

    def offsets(self, n_lanes: int, per_lane: int) -> pa.Array:
        """int32 list offsets ``0, per_lane, 2*per_lane, ...`` (cached)."""
        key = (n_lanes, per_lane)
        arr = self.list_offsets.get(key)
        if arr is None:
            arr = from_numpy(np.arange(n_lanes + 1, dtype=np.int32) * np.int32(per_lane))
            self.list_offsets[key] = arr
        return arr


_TABLES: weakref.WeakKeyDictionary[PlanContext, PlanTables] = weakref.WeakKeyDictionary()


def plan_tables(plan: PlanContext) -> PlanTables:
    """The lookup tables of ``plan`` (computed on first use, then shared by every stream)."""
    tables = _TABLES.get(plan)
    if tables is None:
        streams = plan.streams
        base = streams.stream_base
        protocols = streams.protocols
        stored = plan.artifact.strings
        tables = PlanTables(
            stream_base=base, n_rows=streams.n_rows.astype(_I64),
            piece_ptr=streams.piece_ptr,
            piece_mrid=np.asarray(streams.piece_manifest_row_id, dtype=_I64),
            piece_path=_strings(stored.get("piece_path"), streams.piece_path, empty=True),
            protocol=string_array(protocols),
            group_key=_strings(stored.get("stream_group_key"), plan.group_key_json,
                               empty=True),
            alignment_key=_strings(stored.get("stream_alignment_key"),
                                   plan.alignment_key_json, empty=False),
            key=string_array(plan.key_json) if plan.key_json else None,
        )
        _TABLES[plan] = tables
    return tables


def _strings(stored: pa.Array | None, values: tuple[str, ...], *, empty: bool) -> pa.Array:
    """``values`` as an Arrow string array (then ``""`` when ``empty``): the artifact's own
    array when it holds them (no Python string converted), else made from them."""
    if stored is None or len(stored) != len(values) or not pa.types.is_string(stored.type):
        return string_array([*values, ""] if empty else values)
    if not empty:
        return stored
    if stored.null_count:
        return pa.concat_arrays([stored, string_array([""])])
    # "" appended by one more offset over the same bytes: no copy, and no Arrow call that
    # gives up the interpreter lock (see take_strings: on a busy process each such call
    # waits a switch interval to get it back)
    n, buffers = len(stored), stored.buffers()
    if not n or buffers[1] is None:
        return string_array([""])
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=n + 1, offset=stored.offset * 4)
    return pa.StringArray.from_buffers(n + 1, pa.py_buffer(np.append(offsets, offsets[-1])),
                                       buffers[2] if buffers[2] is not None else pa.py_buffer(b""))


def take_strings(values: pa.Array, idx: np.ndarray) -> pa.Array:
    """``values.take(idx)`` for a string array without nulls, in numpy.

    Arrow's ``take`` releases the interpreter lock, and getting it back costs a switch
    interval (5 ms) whenever another thread holds it: a Flight server's other streams,
    or the training loop beside an in-process reader (measured: 26 us alone, 5.5 ms
    beside one busy thread, for 2,633 strings). These tables are small, so the copy is
    done holding the lock: the strings' offsets gathered, their bytes gathered by one
    index. Other arrays (nulls, other types) go to ``take``.
    """
    if values.null_count or not pa.types.is_string(values.type):
        return values.take(idx)
    n = int(idx.shape[0])
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(values) + 1,
                            offset=values.offset * 4)
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    out_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=out_offsets[1:])
    total = int(out_offsets[-1])
    if total:
        data = np.frombuffer(buffers[2], dtype=np.uint8)
        gather = np.repeat(starts.astype(_I64) - out_offsets[:-1], lengths) + np.arange(
            total, dtype=_I64)
        body = pa.py_buffer(data[gather])
    else:
        body = pa.py_buffer(b"")
    return pa.StringArray.from_buffers(n, pa.py_buffer(out_offsets), body)
