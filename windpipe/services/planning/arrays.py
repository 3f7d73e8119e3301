"""Vectorized index helpers shared by the planner and the materializer (no per-row Python)."""

from __future__ import annotations

import numpy as np

__all__ = ["expand_counts", "split_ranges"]

_I64 = np.int64


def expand_counts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(owner, position)`` for ``counts[i]`` items owned by each ``i``."""
    counts = counts.astype(_I64, copy=False)
    owner = np.repeat(np.arange(counts.shape[0], dtype=_I64), counts)
    starts = np.cumsum(counts) - counts
    return owner, np.arange(owner.shape[0], dtype=_I64) - starts[owner]


def split_ranges(
    part_start: np.ndarray, part_len: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut row ranges ``[lo, hi)`` at the boundaries of consecutive parts.

    ``part_start`` (sorted) and ``part_len`` describe parts (pieces, chunks) of one
    row space. Returns ``(owner, part, r_lo, r_hi)``, one entry per (range, part)
    overlap candidate in range then part order; entries with ``r_hi <= r_lo`` (empty
    parts) are the caller's to drop. Ranges inside one part, the common case, take a
    fast path with no expansion.
    """
    first = np.searchsorted(part_start, lo, side="right") - 1
    last = np.searchsorted(part_start, hi - 1, side="right") - 1
    counts = np.maximum(last - first + 1, 0)
    if counts.shape[0] and bool((counts == 1).all()):
        owner, part = np.arange(lo.shape[0], dtype=_I64), first
    else:
        owner, k = expand_counts(counts)
        part = first[owner] + k
    p_lo = part_start[part]
    return owner, part, np.maximum(lo[owner], p_lo), np.minimum(hi[owner], p_lo + part_len[part])
