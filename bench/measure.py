"""The one timing loop every contender uses, so all are measured alike."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

__all__ = ["consume"]


def consume(batches: Iterator[Any], *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """Pull batches until ``max_batches`` or ``max_seconds``; touch one value of each.

    Each batch is a tuple whose first item is the inputs tensor ``(B, T, C)``.
    """
    start = time.perf_counter()
    n = 0
    checksum = 0.0
    for batch in batches:
        n += 1
        checksum += float(batch[0][0, 0, 0])
        if n >= max_batches or time.perf_counter() - start > max_seconds:
            break
    return {"batches": n, "seconds": time.perf_counter() - start, "checksum": checksum}
