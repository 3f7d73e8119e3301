"""The one timing loop every contender uses, so all are measured alike."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from typing import Any

import psutil

__all__ = ["consume", "tree_cpu_s"]


def tree_cpu_s() -> float:
    """CPU seconds of this process, its live children (servers, DataLoader workers) and the
    children it already reaped."""
    me = psutil.Process()
    total = time.process_time()  # this process, at the clock's resolution (not 10 ms ticks)
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + kids.ru_utime + kids.ru_stime


def consume(batches: Iterator[Any], *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """Pull batches until ``max_batches`` or ``max_seconds``; touch one value of each.

    Each batch is a tuple whose first item is the inputs tensor ``(B, T, C)``.
    ``run_cpu_s`` is the CPU the whole process tree spent in the timed loop (a
    contender's server and workers included), for tokens per CPU-second;
    ``run_process_cpu_s`` the CPU of the consuming process alone (``time.process_time``).
    """
    cpu0 = tree_cpu_s()
    own0 = time.process_time()
    start = time.perf_counter()
    n = 0
    checksum = 0.0
    for batch in batches:
        n += 1
        checksum += float(batch[0][0, 0, 0])
        if n >= max_batches or time.perf_counter() - start > max_seconds:
            break
    seconds = time.perf_counter() - start
    own = time.process_time() - own0
    return {"batches": n, "seconds": seconds, "checksum": checksum,
            "run_cpu_s": tree_cpu_s() - cpu0, "run_process_cpu_s": own}
