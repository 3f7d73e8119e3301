"""What the read paths share: the :class:`ReadPath` protocol, the lanes a read returns
(:class:`LaneArrays`) and the stream's pool of outgoing buffers (:class:`BufferPool`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from windpipe.services.materialize.cache import ChunkRequest
from windpipe.services.materialize.lanes import LanePlan

__all__ = ["BufferPool", "LaneArrays", "ReadPath", "Skipped"]

Skipped = dict[int, tuple[str, str]]  # lane -> (segment path, error) of lanes left out
_POOL_SETS = 8


@dataclass(frozen=True, slots=True, eq=False)
class LaneArrays:
    """A batch's lanes as read: the window block ``windows (B, T + 1, C)`` float32
    (:mod:`windpipe.services.materialize.rows`), ``mask (B, T)`` uint8, and the lanes a bad segment
    left out (padding)."""

    windows: np.ndarray
    mask: np.ndarray
    skipped: Skipped


class ReadPath(Protocol):
    """One way to read a batch's lanes into arrays."""

    def requests(self, lp: LanePlan) -> list[ChunkRequest] | None:
        """The cache loads ``lp`` takes on this path; None when this path does not read it."""
        ...

    def read(self, lp: LanePlan, requests: list[ChunkRequest]) -> LaneArrays:
        """``lp``'s lanes: ``requests`` (what :meth:`requests` gave) pinned while they are
        copied and released before returning."""
        ...


class BufferPool:
    """Outgoing ``(windows, mask)`` arrays of one stream, reused once released.

    gRPC sends Arrow buffers without copying and holds them until written, and each
    holds a reference to its numpy array, so an array whose only referent is the pool
    is free again (at most 8 sets).
    """

    def __init__(self) -> None:
        self._sets: list[tuple[np.ndarray, np.ndarray]] = []

    def take(self, n: int, t: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """A window block ``(n, t + 1, c)`` float32 and a mask ``(n, t)`` uint8 (contents
        undefined)."""
        shapes = ((n, t + 1, c), (n, t))
        for i, arrays in enumerate(self._sets):
            # referenced only by the pool's tuple (and getrefcount's argument): free
            if sys.getrefcount(arrays[0]) == 2 and sys.getrefcount(arrays[1]) == 2:
                if (arrays[0].shape, arrays[1].shape) == shapes:
                    return arrays
                del self._sets[i]
                break
        arrays = (np.empty(shapes[0], np.float32), np.empty(shapes[1], np.uint8))
        if len(self._sets) < _POOL_SETS:
            self._sets.append(arrays)
        return arrays
