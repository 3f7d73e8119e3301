"""A GPU feed's batch memory: the same-host gather written straight into page-locked memory.

The device loader (``windpipe.sdk._loader``) hands a :class:`PinnedBatchMemory` to a source that
builds batches in this process (``windpipe.sdk._local``): the window path's gather of whole
windows (``windpipe.services.materialize.windows``) then writes the batch's window block, its
mask and its ``has_channel`` into one buffer of the loader's pinned pool, so that write
is the batch's only host copy, and the loader moves the window block to the device in
one host-to-device copy (``Batch.to``: ``inputs`` and ``targets`` are views of it there).
Without it a batch is gathered into new memory and then copied into a pinned buffer:
two host copies.

The gather is ``torch.index_select`` into a view of the buffer (numpy cannot fancy-index
a strided view into given memory without an intermediate copy); the buffer's bytes are
the ones numpy's gather writes. The pool (``take``) may refuse while every buffer under
its cap is in flight: ``take`` waits, or answers None when the loader is stopping.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from windpipe.sdk._torch_import import torch

__all__ = ["PinnedBatchMemory", "batch_nbytes"]

_ALIGN = 64
_VIEWS_KEPT = 16  # window views (one per block and length) wrapped as tensors and kept


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def batch_nbytes(lanes: int, seq_len: int, channels: int) -> int:
    """Bytes of a buffer that holds one batch: its window block ``(B, T + 1, C)`` float32,
    its mask ``(B, T)`` and ``has_channel`` (at most ``C`` bytes a lane), each 64-aligned."""
    return (_aligned(lanes * (seq_len + 1) * channels * 4) + _aligned(lanes * seq_len)
            + _aligned(lanes * channels))


class PinnedBatchMemory:
    """Writes one batch at a time into a buffer from ``take(nbytes)`` (a page-locked uint8
    tensor, or None: stop). :meth:`taken` hands the last batch's buffer to the loader,
    which returns it to its pool once the copy out of it is done.

    ``take`` need not give pinned memory: the CPU tests pass plain tensors to count what
    is copied."""

    short_lanes = False  # a batch whose lanes end early is built apart (the general builder)

    def __init__(self, take: Callable[[int], torch.Tensor | None]) -> None:
        self._take = take
        self._buffer: torch.Tensor | None = None
        self._used = 0
        self._views: dict[int, tuple[np.ndarray, torch.Tensor]] = {}

    def gather(self, windows: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``windows[rows]`` written into a new buffer (the batch's first array)."""
        b, t1, c = rows.shape[0], windows.shape[1], windows.shape[2]
        buffer = self._take(batch_nbytes(b, t1 - 1, c))
        if buffer is None:
            msg = "the device loader stopped while a batch was being gathered"
            raise RuntimeError(msg)
        self._buffer, self._used = buffer, 0
        out = self._carve((b, t1, c), torch.float32)
        torch.index_select(self._tensor(windows), 0, torch.from_numpy(rows), out=out)
        return out.numpy()

    def empty(self, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
        """The next ``shape`` array of the current batch's buffer (uint8 only)."""
        if np.dtype(dtype) != np.uint8:
            msg = f"pinned batch memory carves uint8 arrays after the windows, not {dtype}"
            raise TypeError(msg)
        return self._carve(shape, torch.uint8).numpy()

    def taken(self) -> torch.Tensor | None:
        """The buffer of the batch built last (None: it was not built here), once."""
        buffer, self._buffer = self._buffer, None
        return buffer

    def _carve(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        assert self._buffer is not None
        n = 1
        for dim in shape:
            n *= dim
        nbytes = n * (4 if dtype == torch.float32 else 1)
        start = self._used
        if start + nbytes > self._buffer.numel():
            msg = "a batch outgrew its pinned buffer (batch_nbytes is wrong)"
            raise RuntimeError(msg)
        self._used = start + _aligned(nbytes)
        return self._buffer[start:start + nbytes].view(dtype).view(shape)

    def _tensor(self, windows: np.ndarray) -> torch.Tensor:
        """``windows`` as a tensor over the same memory (made once per view: a mapped tier
        block is read-only, which torch warns about once; nothing ever writes it)."""
        kept = self._views.get(id(windows))
        if kept is not None and kept[0] is windows:
            return kept[1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(windows)
        if len(self._views) >= _VIEWS_KEPT:
            self._views.clear()
        self._views[id(windows)] = (windows, tensor)
        return tensor
