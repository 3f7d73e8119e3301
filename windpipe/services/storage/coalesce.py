"""Coalescing byte ranges into the requests that fetch them.

An object-store request costs a round trip (tens of milliseconds) whatever its size,
and reading a few hundred kilobytes nobody asked for costs about a millisecond at
the bandwidths that matter, so ranges closer than ``gap`` bytes are fetched as one
span. A span larger than ``max_span`` is cut into parts fetched side by side: one
connection seldom carries a store's whole bandwidth. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Span", "coalesce", "split"]


@dataclass(frozen=True, slots=True)
class Span:
    """One request: bytes ``[start, end)`` of an object, covering ``ranges`` (sorted)."""

    start: int
    end: int
    ranges: tuple[tuple[int, int], ...]

    @property
    def nbytes(self) -> int:
        """Bytes the request fetches (the ranges and the gaps between them)."""
        return self.end - self.start

    def covers(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` lies inside this span."""
        return self.start <= start and end <= self.end


def coalesce(ranges: Iterable[tuple[int, int]], *, gap: int) -> list[Span]:
    """Sorted, overlapping or nearby (``<= gap`` bytes apart) ranges merged into spans.

    Empty ranges are dropped; the answer is sorted by start and its spans are disjoint.
    """
    if gap < 0:
        raise ValueError(f"gap must be >= 0, got {gap}")
    todo = sorted((int(a), int(b)) for a, b in ranges if b > a)
    spans: list[Span] = []
    members: list[tuple[int, int]] = []
    lo = hi = 0
    for a, b in todo:
        if members and a - hi <= gap:
            hi = max(hi, b)
            members.append((a, b))
            continue
        if members:
            spans.append(Span(lo, hi, tuple(members)))
        lo, hi, members = a, b, [(a, b)]
    if members:
        spans.append(Span(lo, hi, tuple(members)))
    return spans


def split(span: Span, *, max_span: int) -> list[tuple[int, int]]:
    """The parts ``[start, end)`` one span is fetched in: at most ``max_span`` bytes each,
    of near-equal size (so the parts finish together)."""
    if max_span <= 0:
        raise ValueError(f"max_span must be > 0, got {max_span}")
    parts = max(1, -(-span.nbytes // max_span))
    step = -(-span.nbytes // parts)
    return [(s, min(s + step, span.end)) for s in range(span.start, span.end, step)]
