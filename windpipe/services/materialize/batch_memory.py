"""Where the window path writes a batch: fresh numpy arrays, or memory its consumer gives.

A batch of full windows (:mod:`windpipe.services.materialize.windows`) is one gather of whole
windows from a block's window views, a mask and a ``has_channel`` table. By default each
is a new array (a first-axis fancy index: one contiguous copy per window). A consumer
that moves batches on (a GPU feed) passes a :class:`BatchMemory` instead, so the gather
writes straight into its buffer (page-locked memory, ``windpipe.sdk._pinned``) and that write is
the batch's only host copy. The arrays it gives must stay the batch's own until the
consumer is done with the batch (docs/types.md: no two batches share memory).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["BatchMemory"]


class BatchMemory(Protocol):
    """Memory for one batch at a time: :meth:`gather` is called first for each batch, then
    :meth:`empty` for its mask and its ``has_channel``.

    A batch some of whose lanes end early is not written here: the window path gives it
    new arrays when :attr:`short_lanes` says the consumer takes those
    (:class:`~sdk._arrays.AlignedMemory`, whose consumer copies or places what it is
    given), else the general builder makes it (a GPU feed's page-locked buffer holds
    full windows only)."""

    short_lanes: bool

    def gather(self, windows: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``windows[rows]`` (``windows``: the ``(R - T, T + 1, C)`` views of a block;
        ``rows``: int64 window starts) written into this memory; a new batch begins."""
        ...

    def empty(self, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` of the current batch (contents undefined)."""
        ...

