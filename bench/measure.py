"""The one timing loop every contender uses, so all are measured alike."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = ["CpuSnapshot", "children_cpu", "consume", "settled"]


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds of a process's children at one moment, two ways: ``ticks``
    (psutil / ``getrusage``: every thread, dead ones too, in 10 ms clock ticks) and, for
    the live children, ``precise`` (the sum of their live threads' ``schedstat``, in
    nanoseconds). A run of ~0.1 s (the quick bench's) is a few ticks: measured in ticks
    alone, a server idle beside it seems to spend 0 or 10 ms, +-10% of the run."""

    ticks: float
    precise: float

    def since(self, before: CpuSnapshot) -> float:
        """CPU seconds from ``before`` to this snapshot: the precise figure, unless it
        misses more than two ticks of the coarse one (a thread ended in between)."""
        coarse, fine = self.ticks - before.ticks, self.precise - before.precise
        return fine if abs(coarse - fine) <= 2 * _TICK_S else coarse


_TICK_S = 0.01


def _threads_cpu_s(pid: int) -> float | None:
    """CPU seconds of the live threads of ``pid`` (``/proc/<pid>/task/*/schedstat``)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def children_cpu() -> CpuSnapshot:
    """CPU of this process's live children (servers, DataLoader workers) and of the
    children it already reaped (this process's own is ``time.process_time``, precise)."""
    ticks = precise = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            coarse = sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
        fine = _threads_cpu_s(child.pid)
        ticks += coarse
        precise += coarse if fine is None else fine
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = kids.ru_utime + kids.ru_stime
    return CpuSnapshot(ticks=ticks + reaped, precise=precise + reaped)


def settled(*, quiet_s: float = 0.002, window_s: float = 0.02,
            max_s: float = 1.0) -> CpuSnapshot:
    """The children's CPU once they are idle (under ``quiet_s`` of CPU in ``window_s``),
    waiting at most ``max_s``: a server finishing the setup's last request (its log line,
    its database session) must not be counted in the run that follows."""
    before = children_cpu()
    deadline = time.perf_counter() + max_s
    while True:
        time.sleep(window_s)
        now = children_cpu()
        if now.precise - before.precise < quiet_s or time.perf_counter() > deadline:
            return now
        before = now


def consume(batches: Iterator[Any], *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """Pull batches until ``max_batches`` or ``max_seconds``; touch one value of each.

    Each batch is a tuple whose first item is the inputs tensor ``(B, T, C)``.
    ``run_cpu_s`` is the CPU the whole process tree spent in the timed loop (a
    contender's server and workers included), for tokens per CPU-second;
    ``run_process_cpu_s`` the CPU of the consuming process alone (``time.process_time``).
    """
    kids0 = settled()  # (enumerating /proc costs ms: outside the process's window)
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
            "run_cpu_s": own + children_cpu().since(kids0), "run_process_cpu_s": own}
