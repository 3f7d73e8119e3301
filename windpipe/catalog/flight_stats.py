"""Cache statistics of the deployment's Flight servers, and the Prometheus text of ``/metrics``.

:func:`fetch_cache_stats` asks every configured Flight location for its chunk-cache
counters (the ``cache-stats`` action of ``docs/wire.md``), so one dead server neither
hides the others nor stalls the caller. The fan-out is bounded three ways, so a
deployment of hundreds of servers, many of them gone, still answers a scrape in time:
each call has a timeout, at most :data:`MAX_PARALLEL` calls run at once, and the whole
fan-out has a deadline (:data:`DEADLINE_FACTOR` timeouts by default); a server not
asked, or not done, by the deadline is reported ``unavailable``, as is one that cannot
be reached. The counters are validated as the wire contract's
:class:`~services.contract.reports.CacheCounters`; a location that fails, or answers
without them, is reported with a typed error instead of counters: nothing a server
does (or a location it is listed at) makes the caller's answer a 500.

:func:`render_metrics` writes the page of ``/metrics`` with ``prometheus_client``: the
catalog's object counts and one gauge or counter per cache statistic labelled by
``location`` (:class:`ScrapeCollector`, read at scrape time, the library's pattern for
numbers kept elsewhere), with the app's own HTTP request metrics
(``windpipe.catalog.api.metrics``). The library writes the exposition format, escapes the
labels, and answers OpenMetrics to a scraper that asks for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError

from windpipe.catalog.context import CatalogContext
from windpipe.catalog.repository import Repository
from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.reports import CacheCounters
from windpipe.services.contract.wire import ACTION_CACHE_STATS, error_from_flight
from windpipe.services.database import session_scope

__all__ = [
    "CACHE_METRICS",
    "DEADLINE_FACTOR",
    "MAX_PARALLEL",
    "LocationStats",
    "ScrapeCollector",
    "catalog_table_rows",
    "fetch_cache_stats",
    "render_metrics",
]

# cache-stats key -> (metric name, type, help)
CACHE_METRICS: dict[str, tuple[str, str, str]] = {
    "hits": ("windpipe_cache_hits_total", "counter", "chunk lookups served from the cache"),
    "misses": ("windpipe_cache_misses_total", "counter", "chunk lookups that loaded the chunk"),
    "evictions": ("windpipe_cache_evictions_total", "counter", "chunks evicted (LRU)"),
    "bytes_read": ("windpipe_cache_storage_bytes_read_total", "counter",
                   "bytes read from storage by chunk loads"),
    "prefetches": ("windpipe_cache_prefetches_total", "counter", "read-ahead chunk loads"),
    "resident_bytes": ("windpipe_cache_resident_bytes", "gauge", "bytes of loaded chunks"),
    "reserved_bytes": ("windpipe_cache_reserved_bytes", "gauge",
                       "bytes reserved by chunks being loaded"),
    "pinned_bytes": ("windpipe_cache_pinned_bytes", "gauge", "bytes of chunks in use by readers"),
    "peak_bytes": ("windpipe_cache_peak_bytes", "gauge", "highest resident+reserved bytes"),
    "budget_bytes": ("windpipe_cache_budget_bytes", "gauge", "the cache's byte budget"),
    "entries": ("windpipe_cache_entries", "gauge", "chunks in the cache"),
    "loads_in_flight": ("windpipe_cache_loads_in_flight", "gauge", "chunk loads in progress"),
}

_CATALOG_KINDS = ("datasets", "versions", "splits", "plans")

MAX_PARALLEL = 16  # cache-stats calls in flight at once, per fan-out
DEADLINE_FACTOR = 2.0  # the whole fan-out's deadline, in per-call timeouts


@dataclass(frozen=True)
class LocationStats:
    """One Flight location's counters, or the error that stopped us from reading them."""

    location: str
    stats: dict[str, int] | None = None
    error: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"location", "stats"}`` or ``{"location", "error": {"type", "message"}}``."""
        if self.error is not None:
            return {"location": self.location, "error": dict(self.error)}
        return {"location": self.location, "stats": dict(self.stats or {})}


def _error(location: str, kind: ErrorType, message: str) -> LocationStats:
    return LocationStats(location=location, error={"type": str(kind), "message": message})


def _one(location: str, *, timeout_s: float, token: str | None) -> LocationStats:
    options = fl.FlightCallOptions(timeout=timeout_s, headers=flight_headers(token))
    try:
        client = fl.FlightClient(location)
    except (fl.FlightError, pa.ArrowException, ValueError, OSError) as exc:
        # a malformed location, or a scheme without a Flight transport (http://)
        return _error(location, ErrorType.INVALID_REQUEST, f"cannot connect to {location}: {exc}")
    try:
        results = list(client.do_action(fl.Action(ACTION_CACHE_STATS, b""), options=options))
    except (fl.FlightError, OSError) as exc:
        typed = error_from_flight(exc, where=location)
        return _error(location, typed.type, typed.message)
    finally:
        client.close()
    try:
        body = json.loads(results[0].body.to_pybytes()) if results else None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _error(location, ErrorType.INTERNAL,
                      f"{location} answered cache-stats with something other than a JSON object")
    try:
        counters = CacheCounters.model_validate(
            {str(k): int(v) for k, v in body.items() if isinstance(v, (int, float))})
    except ValidationError as exc:
        missing = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        return _error(location, ErrorType.INTERNAL,
                      f"{location} answered cache-stats without the counters {missing}")
    return LocationStats(location=location, stats=counters.model_dump())


def _outcome(location: str, future: Future[LocationStats], deadline_s: float
             ) -> LocationStats:
    if not future.done():
        asked = "was not done" if future.running() else "was not asked"
        return _error(location, ErrorType.UNAVAILABLE,
                      f"{location} {asked} within the {deadline_s:g} s deadline of the "
                      "fan-out to every Flight server")
    exc = future.exception()
    if exc is not None:  # a bug of ours: the others' answers still count
        return _error(location, ErrorType.INTERNAL,
                      f"reading the cache-stats of {location} failed: {type(exc).__name__}")
    return future.result()


def fetch_cache_stats(
    locations: Sequence[str], *, timeout_s: float = 2.0, token: str | None = None,
    max_parallel: int = MAX_PARALLEL, deadline_s: float | None = None,
) -> list[LocationStats]:
    """The ``cache-stats`` of every location, in the given order: at most
    ``max_parallel`` calls at once, each within ``timeout_s``, all within ``deadline_s``
    (default ``DEADLINE_FACTOR * timeout_s``); a location not answered by then is
    reported ``unavailable``. Never raises for what a location or server does."""
    if not locations:
        return []
    deadline = DEADLINE_FACTOR * timeout_s if deadline_s is None else deadline_s
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(locations), max_parallel)),
                              thread_name_prefix="windpipe-cache-stats")
    try:
        futures = [pool.submit(_one, loc, timeout_s=timeout_s, token=token)
                   for loc in locations]
        wait(futures, timeout=deadline)
        return [_outcome(loc, fut, deadline) for loc, fut in zip(locations, futures,
                                                                  strict=True)]
    finally:
        # the calls still running end within their own timeout; the caller does not wait
        pool.shutdown(wait=False, cancel_futures=True)


def catalog_table_rows(ctx: CatalogContext) -> dict[str, int]:
    """Rows of every catalog table (``datasets``, ``versions``, ``splits``, ``plans``, ...)."""
    with session_scope(ctx.sessions) as session:
        return Repository(session).count_rows()


class ScrapeCollector(Collector):
    """The catalog's object counts and the Flight servers' cache statistics, as read for
    one scrape (a custom collector: the numbers live in the database and on the servers,
    not in this process)."""

    def __init__(self, *, table_rows: Mapping[str, int], servers: Sequence[LocationStats]
                 ) -> None:
        self.table_rows = dict(table_rows)
        self.servers = list(servers)

    def collect(self) -> Iterator[Metric]:
        """One family per catalog kind, the table rows, ``windpipe_flight_up`` and one
        family per cache statistic."""
        for kind in _CATALOG_KINDS:
            yield GaugeMetricFamily(f"windpipe_catalog_{kind}", f"{kind} stored in the catalog",
                                    value=self.table_rows.get(kind, 0))
        rows = GaugeMetricFamily("windpipe_catalog_table_rows", "rows of each catalog table",
                                 labels=["table"])
        for table, n in sorted(self.table_rows.items()):
            rows.add_metric([table], n)
        yield rows
        up = GaugeMetricFamily("windpipe_flight_up",
                               "1 if the Flight location answered cache-stats, else 0",
                               labels=["location"])
        for server in self.servers:
            up.add_metric([server.location], 0 if server.stats is None else 1)
        yield up
        for key, (name, kind, help_) in CACHE_METRICS.items():
            family = (CounterMetricFamily(name, help_, labels=["location"]) if kind == "counter"
                      else GaugeMetricFamily(name, help_, labels=["location"]))
            for server in self.servers:
                if server.stats is not None and key in server.stats:
                    family.add_metric([server.location], server.stats[key])
            yield family


def render_metrics(
    *, table_rows: Mapping[str, int], servers: Sequence[LocationStats],
    http: Collector | None = None, accept: str | None = None,
) -> tuple[bytes, str]:
    """The ``/metrics`` page and its content type: the catalog counts, ``http`` (the
    app's request metrics) and the cache statistics, in the format ``accept`` asks for
    (Prometheus text 0.0.4 unless the scraper asks for OpenMetrics)."""
    registry = CollectorRegistry(auto_describe=False)  # one scrape's: nothing global
    scrape = ScrapeCollector(table_rows=table_rows, servers=servers)
    registry.register(scrape)
    if http is not None:
        registry.register(http)
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
