"""Process-wide latency histograms of the services layer (storage reads), exposed by every server.

A storage read happens in whichever process asks for it: the catalog inspecting a
registration's segments, a Flight server loading chunks, a training process reading
them in process. The storage code has no server to report to, and ``pip install
windpipe`` (the client) comes without ``prometheus_client``, so this module keeps its
own small fixed-bucket histograms, cheap enough for every chunk read (a lock and a
binary search, never per row), and each server's ``/metrics`` exposes them through
:func:`collector` (read at scrape time, the library's pattern for numbers kept
elsewhere). Several servers in one process show the same process-wide figures.

The names and buckets are in ``docs/operations.md`` ("Metrics").
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # prometheus_client is a server dependency, asked for at scrape time
    from prometheus_client.registry import Collector

__all__ = [
    "READ_BUCKETS",
    "STORAGE_READS",
    "STORAGE_READ_ERRORS",
    "Counts",
    "Timings",
    "collector",
]

# seconds: a chunk of a warm local file reads in well under a millisecond, one from an
# object store in tens of milliseconds, one from a store that stalls in seconds
READ_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                5.0, 10.0, 30.0)


@dataclass
class _Series:
    counts: list[int]  # per bucket, the last one +Inf
    total: float = 0.0


@dataclass
class Timings:
    """A latency histogram keyed by a tuple of label values (a small, fixed set: the
    labels are kinds of operation and of store, never paths or ids)."""

    name: str
    documentation: str
    labelnames: tuple[str, ...]
    buckets: tuple[float, ...] = READ_BUCKETS
    _series: dict[tuple[str, ...], _Series] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        """One operation of ``seconds`` under ``labels`` (one value per label name)."""
        slot = bisect_left(self.buckets, seconds)  # le semantics: seconds <= bound
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = _Series([0] * (len(self.buckets) + 1))
            series.counts[slot] += 1
            series.total += seconds

    @contextmanager
    def time(self, labels: tuple[str, ...]) -> Iterator[None]:
        """Observe the time the block takes, whether it returns or raises."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.observe(labels, time.perf_counter() - started)

    def snapshot(self) -> dict[tuple[str, ...], tuple[list[int], float]]:
        """Label values -> (count per bucket, sum of seconds), copied under the lock."""
        with self._lock:
            return {k: (list(s.counts), s.total) for k, s in self._series.items()}


@dataclass
class Counts:
    """A counter keyed by a tuple of label values (as :class:`Timings`)."""

    name: str
    documentation: str
    labelnames: tuple[str, ...]
    _values: dict[tuple[str, ...], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def inc(self, labels: tuple[str, ...]) -> None:
        """Count one under ``labels``."""
        with self._lock:
            self._values[labels] = self._values.get(labels, 0) + 1

    def snapshot(self) -> dict[tuple[str, ...], int]:
        """Label values -> count, copied under the lock."""
        with self._lock:
            return dict(self._values)


STORAGE_READS = Timings(
    "windpipe_storage_read_seconds",
    "seconds each storage read took in this process, checks and decoding included, by "
    "operation (chunk: one chunk of a segment; file: a small file read whole for many "
    "chunks; inspect: a segment's metadata at registration) and store (file, s3)",
    ("op", "store"))
STORAGE_READ_ERRORS = Counts(
    "windpipe_storage_read_errors",
    "storage reads in this process that failed, by operation, store and error type",
    ("op", "store", "type"))

_TIMINGS: Sequence[Timings] = (STORAGE_READS,)
_COUNTS: Sequence[Counts] = (STORAGE_READ_ERRORS,)


def collector() -> Collector:
    """A ``prometheus_client`` collector of this process's :class:`Timings` and
    :class:`Counts`, read at each scrape (register it in a server's registry)."""
    from prometheus_client.metrics_core import (  # noqa: PLC0415
        CounterMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector  # noqa: PLC0415
    from prometheus_client.utils import floatToGoString  # noqa: PLC0415

    class _Collector(Collector):
        def collect(self) -> Iterator[Metric]:
            for timings in _TIMINGS:
                family = HistogramMetricFamily(timings.name, timings.documentation,
                                               labels=list(timings.labelnames))
                bounds = [*(floatToGoString(b) for b in timings.buckets), "+Inf"]
                for labels, (counts, total) in sorted(timings.snapshot().items()):
                    cumulative: list[tuple[str, float]] = []
                    running = 0
                    for bound, n in zip(bounds, counts, strict=True):
                        running += n
                        cumulative.append((bound, float(running)))
                    family.add_metric(list(labels), cumulative, total)
                yield family
            for tally in _COUNTS:
                counter = CounterMetricFamily(tally.name, tally.documentation,
                                              labels=list(tally.labelnames))
                for labels, value in sorted(tally.snapshot().items()):
                    counter.add_metric(list(labels), float(value))
                yield counter

        def describe(self) -> Iterator[Any]:
            return iter(())  # names known only at collect time: never checked for clashes

    return _Collector()
