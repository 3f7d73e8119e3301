"""A Flight server's own Prometheus metrics, and the small HTTP endpoint that serves them.

The catalog's ``/metrics`` asks every Flight server for its cache counters at scrape
time; this page is the server's own view, scraped from the server itself (a host's
numbers stay visible while the catalog is down, and only a server knows its streams'
latencies). Written with ``prometheus_client`` (the Prometheus project's Python client:
thread-safe counters and histograms, the exposition format, an HTTP server), each
server in its own :class:`~prometheus_client.CollectorRegistry`, never the library's
global one, so several servers in one process (tests, ``windpipe serve all``) count
apart.

What it exposes (``docs/operations.md``):

* ``windpipe_flight_streams_total{outcome}``: streams ended ``completed``, ``cancelled``,
  with an ``error``, or ``stalled`` (their client took nothing for
  ``flight_stream_stall_s``: ``windpipe.flight_server.stream_slots``);
  ``windpipe_flight_active_streams``; ``windpipe_flight_refused_streams_total``: streams
  refused because ``flight_max_streams`` were open.
* ``windpipe_flight_batch_build_seconds``: how long each batch took to come out of the
  build pipeline (chunks read, decoded, windows assembled), as the stream waited for it;
  the build-ahead thread's head start shortens it.
* ``windpipe_flight_batch_send_seconds``: how long each batch took to leave once built,
  from handing it to gRPC until gRPC asked for the next (serialization, the network and
  a slow client's flow control).
* ``windpipe_flight_stream_seconds{outcome}``: each stream's duration, by how it ended.
* ``windpipe_flight_sent_batches_total``, ``windpipe_flight_sent_bytes_total``.
* ``windpipe_flight_errors_total{method,type}``: every call that ended in an error, by
  Flight method and windpipe error type (a server middleware sees the call's final
  status, a stream's too).
* The chunk cache's counters and gauges (``windpipe_flight_cache_*``, the keys of the
  ``cache-stats`` action) and the host tier's (``windpipe_flight_tier_*``; with the
  background fill, ``windpipe_flight_tier_fill_blocks_total`` and
  ``windpipe_flight_tier_fill_failures_total``), read at scrape time.
* The process's RSS, open files and CPU time (``process_*``, ``prometheus_client``'s
  process collector) and its storage reads (``windpipe_storage_read_seconds``,
  ``windpipe_storage_read_errors_total``: ``windpipe.services.timings``).

:func:`serve_metrics` starts ``prometheus_client``'s HTTP server on the Flight host
(``WINDPIPE_FLIGHT_METRICS_PORT``, off unless set). It asks no token, like most
Prometheus targets: it shows counts and timings only, no plan, path or principal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

import pyarrow.flight as fl
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from windpipe.services.contract.wire import error_from_flight
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.tier import Tier
from windpipe.services.timings import collector as services_timings

__all__ = [
    "BATCH_BUCKETS",
    "METRICS_MIDDLEWARE",
    "STREAM_BUCKETS",
    "FlightMetrics",
    "MetricsEndpoint",
    "serve_metrics",
]

T = TypeVar("T")

METRICS_MIDDLEWARE = "windpipe-metrics"

# seconds: a batch of cached chunks builds in well under a millisecond, one that waits
# on object storage in seconds
BATCH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                 5.0, 10.0, 30.0)

# seconds: a stream of a few batches ends in milliseconds, an epoch's pass in minutes
STREAM_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
                  3600.0)

# keys of ChunkCache.stats() that only grow (counters); the others are gauges
_CACHE_COUNTERS = frozenset({"hits", "misses", "evictions", "prefetches", "bytes_read"})
# keys of Tier.stats() that only grow in this process (counters); the others are gauges
_TIER_COUNTERS = frozenset({"tier_builds", "tier_hits", "tier_evictions", "tier_bytes_written"})


class _StateCollector(Collector):
    """The cache's and the tier's numbers and the open streams, read at scrape time."""

    def __init__(self, *, cache: ChunkCache, tier: Tier | None,
                 active_streams: Callable[[], int],
                 tier_fill: Callable[[], tuple[int, int]] | None) -> None:
        self.cache = cache
        self.tier = tier
        self.active_streams = active_streams
        self.tier_fill = tier_fill

    def collect(self) -> Iterator[Metric]:
        """Active streams, then one family per cache and per tier statistic."""
        yield GaugeMetricFamily("windpipe_flight_active_streams", "streams being served now",
                                value=self.active_streams())
        for key, value in self.cache.stats().as_dict().items():
            name, text = f"windpipe_flight_cache_{key}", f"chunk cache: {key.replace('_', ' ')}"
            yield (CounterMetricFamily(name, text, value=value) if key in _CACHE_COUNTERS
                   else GaugeMetricFamily(name, text, value=value))
        if self.tier_fill is not None:
            blocks, failures = self.tier_fill()
            yield CounterMetricFamily("windpipe_flight_tier_fill_blocks", "blocks the "
                                      "background fill decoded into the tier", value=blocks)
            yield CounterMetricFamily("windpipe_flight_tier_fill_failures", "background "
                                      "tier fills that ended in an error (a full disk, a "
                                      "store that does not answer)", value=failures)
        if self.tier is None:
            return
        for key, value in self.tier.stats().items():
            name = f"windpipe_flight_{key}"
            text = f"host tier: {key.removeprefix('tier_').replace('_', ' ')}"
            yield (CounterMetricFamily(name, text, value=value) if key in _TIER_COUNTERS
                   else GaugeMetricFamily(name, text, value=value))


class _CallMetrics(fl.ServerMiddleware):  # type: ignore[misc]
    def __init__(self, errors: Counter, method: str) -> None:
        self._errors = errors
        self._method = method

    def call_completed(self, exception: BaseException | None) -> None:
        if exception is not None:
            self._errors.labels(self._method, error_from_flight(exception).type.value).inc()


class _CallMetricsFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    def __init__(self, errors: Counter) -> None:
        self._errors = errors

    def start_call(self, info: Any, headers: dict[str, Any]) -> _CallMetrics:
        method = getattr(info.method, "name", str(info.method)).lower()
        return _CallMetrics(self._errors, method)


class FlightMetrics:
    """One Flight server's metrics (see the module docstring), in :attr:`registry`.

    The server calls :meth:`watch` once its cache exists, iterates its build pipeline
    through :meth:`timed`, and reports each batch sent (:meth:`sent`), each stream's
    end (:meth:`stream_ended`) and each refused (:meth:`refused`); :meth:`middleware`
    counts failed calls.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.streams = Counter("windpipe_flight_streams", "streams ended, by outcome "
                               "(completed, cancelled, error, stalled)", ["outcome"],
                               registry=self.registry)
        self.refused_streams = Counter("windpipe_flight_refused_streams", "streams refused "
                                       "because flight_max_streams streams were open",
                                       registry=self.registry)
        self.batch_seconds = Histogram(
            "windpipe_flight_batch_build_seconds", "seconds each batch took to come out of "
            "the build pipeline (chunks read and decoded, windows assembled)",
            buckets=BATCH_BUCKETS, registry=self.registry)
        self.send_seconds = Histogram(
            "windpipe_flight_batch_send_seconds", "seconds each built batch took to leave: "
            "from handing it to gRPC until gRPC asked for the next",
            buckets=BATCH_BUCKETS, registry=self.registry)
        self.stream_seconds = Histogram(
            "windpipe_flight_stream_seconds", "seconds each stream lasted, by outcome "
            "(completed, cancelled, error, stalled)", ["outcome"],
            buckets=STREAM_BUCKETS, registry=self.registry)
        self.sent_batches = Counter("windpipe_flight_sent_batches", "record batches sent",
                                    registry=self.registry)
        self.sent_bytes = Counter("windpipe_flight_sent_bytes", "bytes of the record "
                                  "batches sent", registry=self.registry)
        self.errors = Counter("windpipe_flight_errors", "calls that ended in an error, by "
                              "Flight method and error type", ["method", "type"],
                              registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.registry.register(services_timings())

    def watch(self, *, cache: ChunkCache, tier: Tier | None,
              active_streams: Callable[[], int],
              tier_fill: Callable[[], tuple[int, int]] | None = None) -> None:
        """Expose the cache's and the tier's numbers, the open streams and the tier fill's
        (blocks, failures), read at each scrape."""
        self.registry.register(_StateCollector(cache=cache, tier=tier,
                                               active_streams=active_streams,
                                               tier_fill=tier_fill))

    def middleware(self) -> fl.ServerMiddlewareFactory:
        """The server middleware that counts every call ending in an error."""
        return _CallMetricsFactory(self.errors)

    def timed(self, items: Iterable[T]) -> Generator[T, None, None]:
        """``items``, timing how long each took to come (the batch build histogram);
        closes ``items`` when closed itself, as the loop over them would."""
        it = iter(items)
        try:
            while True:
                started = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    return
                self.batch_seconds.observe(time.perf_counter() - started)
                yield item
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def sent(self, nbytes: int, *, seconds: float) -> None:
        """One batch of ``nbytes`` handed to the client, which took ``seconds`` to leave."""
        self.sent_batches.inc()
        self.sent_bytes.inc(nbytes)
        self.send_seconds.observe(seconds)

    def stream_ended(self, outcome: str, *, seconds: float) -> None:
        """A stream ended ``completed``, ``cancelled``, ``error`` or ``stalled`` after
        ``seconds``."""
        self.streams.labels(outcome).inc()
        self.stream_seconds.labels(outcome).observe(seconds)

    def refused(self) -> None:
        """A stream refused: ``flight_max_streams`` streams were open."""
        self.refused_streams.inc()


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` HTTP server: ``url`` to scrape, :meth:`close` to stop it."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """``http://host:port/metrics`` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def serve_metrics(registry: CollectorRegistry, *, host: str, port: int) -> MetricsEndpoint:
    """Serve ``registry`` over HTTP on ``host:port`` (0: a free port) in a daemon thread
    (``prometheus_client.start_http_server``)."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsEndpoint(host=host, port=int(server.server_port), _server=server,
                           _thread=thread)
