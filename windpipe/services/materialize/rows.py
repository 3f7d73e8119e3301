"""The row layout: what every decoded chunk, block and batch of the materializer holds.

One float32 matrix per chunk and per block, ``(rows, C)`` row-major with
``C = C_in + C_out``: a row's first ``C_in`` values are its inputs (scaled; null, NaN,
+-inf and absent channels ``-2.0``), the last ``C_out`` its targets (scaled; null and
absent ``NaN``). A batch is a **window block** ``(B, T + 1, C)``: lane ``b`` holds the
``T + 1`` rows its window reads (the ``T`` input rows and the target row after them),
rows past the end of its stream (or a whole padding lane) being :func:`pad_row`. Its
tensors are views of that one copy (SEMANTICS 5, docs/types.md)::

    inputs  = windows[:, :T, :C_in]     # rows 0 .. T-1
    targets = windows[:, 1:, C_in:]     # rows 1 .. T: the rows one ahead

so one window is one contiguous run of ``(T + 1) * C`` values wherever it is copied
from (the careful hand loader's one copy per window), and a row's inputs and
targets travel together. Two cells of a window block are never seen through either
view: row ``T``'s inputs and row 0's targets.

Splitting a window block into contiguous ``inputs`` and ``targets`` (wire v1, which sends
them as two columns) is a strided copy of 3-4 bytes runs: several times the cost of the
copy that made the block (docs/wire.md says so).

A plan read with ``input_valid`` (SEMANTICS 5b) holds ``NaN``, not ``-2.0``, where an
input is not a real value (``ChannelSpec.input_fill``): in its chunks, its blocks and
its pad rows. Once a batch's window block is gathered, :func:`fill_inputs` reads
``input_valid`` off those NaNs and writes the ``-2.0`` over them, so the batch's values
are the ones a plan read without it has, byte for byte. A real value that happens to
be ``-2.0`` is therefore never taken for a fill.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windpipe.services.contract.wire import INPUT_PAD

__all__ = [
    "RowMatrix", "fill_inputs", "input_view", "pad_row", "split_copy", "target_view",
    "window_views",
]


@dataclass(frozen=True, slots=True, eq=False)
class RowMatrix:
    """Rows in this layout: ``rows (n, C_in + C_out)`` float32, C-contiguous, and where a
    row's targets start (what a chunk and a block hold)."""

    rows: np.ndarray
    c_in: int

    @property
    def inputs(self) -> np.ndarray:
        """``(n, C_in)``: every row's inputs (a strided view)."""
        return self.rows[:, : self.c_in]

    @property
    def targets(self) -> np.ndarray:
        """``(n, C_out)``: every row's targets (a strided view)."""
        return self.rows[:, self.c_in :]

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return int(self.rows.nbytes)

    def windows(self, t: int) -> np.ndarray:
        """Overlapping views ``(n - T, T + 1, C)`` of every window of ``T`` input rows and
        its target row (:func:`window_views`); no copy."""
        return window_views(self.rows, t)


def pad_row(c_in: int, c_out: int, *, input_fill: float = INPUT_PAD) -> np.ndarray:
    """The row of a position past a lane's stream: inputs ``-2.0`` (``input_fill``: NaN
    for a plan read with ``input_valid``), targets ``NaN``."""
    row = np.empty(c_in + c_out, dtype=np.float32)
    row[:c_in] = input_fill
    row[c_in:] = np.nan
    return row


def fill_inputs(windows: np.ndarray, c_in: int) -> np.ndarray:
    """``input_valid`` of a window block gathered from NaN-filled rows (the module
    docstring): uint8 ``(B, T, C_in)``, 1 where the input is a real value; the NaN inputs
    of every row (row ``T``'s too) are set to ``-2.0`` in place. Three vectorized passes
    over the inputs, paid only by a plan read with ``input_valid``."""
    inputs = windows[:, :, :c_in]
    missing = np.isnan(inputs)
    np.copyto(inputs, np.float32(INPUT_PAD), where=missing)
    b, t1 = windows.shape[0], windows.shape[1]
    valid = np.empty((b, max(t1 - 1, 0), c_in), dtype=np.uint8)
    np.logical_not(missing[:, :-1], out=valid.view(np.bool_))
    return valid


def window_views(rows: np.ndarray, t: int) -> np.ndarray:
    """Overlapping views ``(R - T, T + 1, C)`` of every window of ``T + 1`` rows of a
    C-contiguous row matrix ``(R, C)`` (window ``r``: rows ``r .. r + T``); no copy. A
    first-axis fancy index of it by window starts is one contiguous copy per window."""
    n = rows.shape[0] - t
    c = rows.shape[1]
    if n <= 0:
        return np.empty((0, t + 1, c), dtype=rows.dtype)
    row = rows.strides[0]
    return np.ndarray((n, t + 1, c), dtype=rows.dtype, buffer=rows,
                      strides=(row, row, rows.strides[1]))


def input_view(windows: np.ndarray, c_in: int) -> np.ndarray:
    """``inputs (B, T, C_in)`` of a window block: rows ``0 .. T-1``, the first ``C_in``
    channels (a strided view)."""
    return windows[:, :-1, :c_in]


def target_view(windows: np.ndarray, c_in: int) -> np.ndarray:
    """``targets (B, T, C_out)`` of a window block: rows ``1 .. T``, the channels after
    ``C_in`` (a strided view)."""
    return windows[:, 1:, c_in:]


def split_copy(windows: np.ndarray, c_in: int) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous copies of a window block's ``inputs`` and ``targets`` (wire v1).

    Each row's inputs (and targets) are copied as one item of ``C_in`` (``C_out``) values,
    not value by value: ~1.8x faster than ``np.ascontiguousarray`` of the views."""
    b, t1, c = windows.shape
    t, c_out = t1 - 1, c - c_in
    block = np.ascontiguousarray(windows)
    stride = (block.strides[0], block.strides[1])
    out = []
    for width, offset in ((c_in, 0), (c_out, block.strides[1] + c_in * block.itemsize)):
        if width == 0 or b == 0 or t == 0:
            out.append(np.zeros((b, t, width), dtype=np.float32))
            continue
        items = np.ndarray((b, t), dtype=np.dtype(f"V{width * block.itemsize}"), buffer=block,
                           offset=offset, strides=stride)
        out.append(items.copy().view(np.float32).reshape(b, t, width))
    return out[0], out[1]
