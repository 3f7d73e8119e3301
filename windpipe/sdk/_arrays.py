"""A plan's batches as numpy arrays, without torch: what frameworks beside torch are fed.

The torch path wraps a pass's records (a streamed Arrow record batch, or a batch built in
this process) in :class:`~sdk.Batch` tensors (``windpipe.sdk._sources.to_batch``). This module
reads the very same records into numpy views instead, so TensorFlow (``windpipe.sdk._tf``) gets
the same values byte for byte, and a process that never installed torch can train:

* a plain plan's batch is one :data:`ArrayBatch`: ``inputs`` float32 ``(B, T, C_in)``,
  ``targets`` float32 ``(B, T, C_out)`` (the rows one ahead), ``mask`` bool ``(B, T)``,
  ``target_valid`` bool ``(B, T)`` (the mask AND every target finite: the mask of a
  loss), ``has_channel`` bool ``(B, C)``, ``batch_idx`` int64 (the rank-local index;
  resume after it with ``batch_idx + 1``) and, when the pass was asked for it,
  ``input_valid`` bool ``(B, T, C_in)``: ``Batch``'s fields of the same names;
* an aligned plan's batch (SEMANTICS 9) has the same names, each a dict by protocol
  (in the plan's protocol order), plus ``has_data`` bool ``(B,)`` per protocol:
  ``AlignedBatch``'s dict views.

The arrays are views of the record (no copy); treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from windpipe.sdk._batch_state import list_values
from windpipe.sdk._exceptions import InternalError
from windpipe.services.contract.wire import INPUT_VALID_COLUMN, BatchMetadata
from windpipe.services.materialize.builder import BuiltBatch

__all__ = ["ArrayBatch", "array_batch", "array_batches"]

# one batch: field name -> array (a plain plan), or -> {protocol: array} (an aligned plan)
ArrayBatch = dict[str, Any]


def _values(column: pa.Array, shape: tuple[int, ...], dtype: type, what: str) -> np.ndarray:
    values = list_values(column)
    expected = int(np.prod(shape))
    if len(values) != expected:
        msg = f"{what}: the record batch holds {len(values)} values, its metadata says {shape}"
        raise ValueError(msg)
    if expected == 0:
        return np.empty(shape, dtype=dtype)
    array: np.ndarray = values.to_numpy(zero_copy_only=True)
    return array.view(dtype).reshape(shape)


def _windows(windows: np.ndarray, c_in: int) -> tuple[np.ndarray, np.ndarray]:
    """``inputs`` and ``targets``, the views of a window block (docs/types.md)."""
    return windows[:, :-1, :c_in], windows[:, 1:, c_in:]


def array_batch(record: pa.RecordBatch | BuiltBatch, meta: BatchMetadata) -> ArrayBatch:
    """One record of a pass (a streamed record batch or a batch built in this process) as
    an :data:`ArrayBatch`: the values :func:`windpipe.sdk._sources.to_batch` wraps as tensors."""
    t, c_in = meta.seq_len, meta.c_in
    if isinstance(record, BuiltBatch):
        inputs, targets = _windows(record.windows, c_in)
        mask = record.mask.view(np.bool_)
        has = record.has_channel.view(np.bool_)
        valid = None if record.input_valid is None else record.input_valid.view(np.bool_)
    else:
        lanes = record.num_rows
        if record.schema.names[0] == "windows":  # wire v2: one block, inputs/targets views
            block = _values(record.column(0), (lanes, t + 1, c_in + meta.c_out), np.float32,
                            "windows")
            inputs, targets = _windows(block, c_in)
        else:
            inputs = _values(record.column("inputs"), (lanes, t, c_in), np.float32, "inputs")
            targets = _values(record.column("targets"), (lanes, t, meta.c_out), np.float32,
                              "targets")
        mask = _values(record.column("mask"), (lanes, t), np.bool_, "mask")
        has = _values(record.column("has_channel"), (lanes, len(meta.channels)), np.bool_,
                      "has_channel")
        valid = None
        if INPUT_VALID_COLUMN in record.schema.names:
            valid = _values(record.column(INPUT_VALID_COLUMN), (lanes, t, c_in), np.bool_,
                            INPUT_VALID_COLUMN)
    out: ArrayBatch = {
        "inputs": inputs, "targets": targets, "mask": mask,
        "target_valid": mask & np.isfinite(targets).all(axis=-1), "has_channel": has,
        "batch_idx": np.int64(meta.batch_idx),
    }
    if valid is not None:
        out["input_valid"] = valid
    return out


def array_batches(records: Iterable[tuple[Any, BatchMetadata]]) -> Iterator[ArrayBatch]:
    """A pass's records as :data:`ArrayBatch` es, an aligned batch's parts put together
    (as :func:`windpipe.sdk._aligned.group_parts` does for torch)."""
    parts: dict[str, ArrayBatch] = {}
    has: dict[str, np.ndarray] = {}
    for record, meta in records:
        aligned = meta.aligned
        if aligned is None:
            yield array_batch(record, meta)
            continue
        if aligned.part != len(parts):
            msg = (f"batch {meta.batch_idx}: aligned part {aligned.part} arrived after "
                   f"{len(parts)} part(s)")
            raise InternalError(msg)
        parts[aligned.protocol] = array_batch(record, meta)
        has[aligned.protocol] = np.asarray(aligned.has_data, dtype=np.bool_)
        if len(parts) == aligned.parts:
            names = [k for k in next(iter(parts.values())) if k != "batch_idx"]
            out: ArrayBatch = {name: {p: part[name] for p, part in parts.items()}
                               for name in names}
            out["has_data"] = has
            out["batch_idx"] = np.int64(meta.batch_idx)
            yield out
            parts, has = {}, {}
    if parts:
        msg = f"the stream ended inside an aligned batch ({len(parts)} part(s) received)"
        raise InternalError(msg)
