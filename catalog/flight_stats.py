"""Cache statistics of the deployment's Flight servers, and the Prometheus text of ``/metrics``.

:func:`fetch_cache_stats` asks every configured Flight location for its chunk-cache
counters (the ``cache-stats`` action of ``docs/wire.md``), all at once and each
within a short timeout, so one dead server neither hides the others nor stalls the
caller. The counters are validated as the wire contract's
:class:`~services.contract.reports.CacheCounters`; a location that fails, or answers
without them, is reported with a typed error instead of counters.

:func:`render_metrics` writes the Prometheus text exposition format (0.0.4): the
catalog's object counts, HTTP requests by route and status, and one gauge or
counter per cache statistic labelled by ``location``.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow.flight as fl
from pydantic import ValidationError

from catalog.context import CatalogContext
from catalog.repository import Repository
from services.contract.auth import flight_headers
from services.contract.errors import ErrorType
from services.contract.reports import CacheCounters
from services.contract.wire import ACTION_CACHE_STATS, error_from_flight
from services.database import session_scope

__all__ = [
    "CACHE_METRICS",
    "PROMETHEUS_CONTENT_TYPE",
    "LocationStats",
    "RequestCounter",
    "catalog_table_rows",
    "fetch_cache_stats",
    "render_metrics",
]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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
    except (fl.FlightError, ValueError, OSError) as exc:  # a malformed location
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


def fetch_cache_stats(
    locations: Sequence[str], *, timeout_s: float = 2.0, token: str | None = None
) -> list[LocationStats]:
    """The ``cache-stats`` of every location, in the given order (concurrently)."""
    if not locations:
        return []
    with ThreadPoolExecutor(max_workers=min(len(locations), 16)) as pool:
        return list(pool.map(lambda loc: _one(loc, timeout_s=timeout_s, token=token),
                             locations))


def catalog_table_rows(ctx: CatalogContext) -> dict[str, int]:
    """Rows of every catalog table (``datasets``, ``versions``, ``splits``, ``plans``, ...)."""
    with session_scope(ctx.sessions) as session:
        return Repository(session).count_rows()


class RequestCounter:
    """Thread-safe HTTP request counts keyed by ``(method, route, status)``."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()

    def add(self, method: str, route: str, status: int) -> None:
        """Count one finished request."""
        with self._lock:
            self._counts[(method, route, status)] += 1

    def snapshot(self) -> dict[tuple[str, str, int], int]:
        """A copy of the counts."""
        with self._lock:
            return dict(self._counts)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(labels: Mapping[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _family(lines: list[str], name: str, kind: str, help_: str,
            samples: Iterable[tuple[Mapping[str, Any], float]]) -> None:
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        number = int(value) if float(value).is_integer() else value
        lines.append(f"{name}{_labels(labels)} {number}")


def render_metrics(
    *, table_rows: Mapping[str, int], requests: Mapping[tuple[str, str, int], int],
    servers: Sequence[LocationStats],
) -> str:
    """The Prometheus text of the catalog counts, HTTP requests and cache statistics."""
    lines: list[str] = []
    for kind in _CATALOG_KINDS:
        _family(lines, f"windpipe_catalog_{kind}", "gauge", f"{kind} stored in the catalog",
                [({}, table_rows.get(kind, 0))])
    _family(lines, "windpipe_catalog_table_rows", "gauge", "rows of each catalog table",
            [({"table": t}, n) for t, n in sorted(table_rows.items())])
    _family(lines, "windpipe_http_requests_total", "counter",
            "HTTP requests answered, by method, route template and status",
            [({"method": m, "route": r, "status": s}, n)
             for (m, r, s), n in sorted(requests.items())])
    _family(lines, "windpipe_flight_up", "gauge",
            "1 if the Flight location answered cache-stats, else 0",
            [({"location": s.location}, 0 if s.stats is None else 1) for s in servers])
    for key, (name, kind, help_) in CACHE_METRICS.items():
        _family(lines, name, kind, help_, [
            ({"location": s.location}, s.stats[key])
            for s in servers if s.stats is not None and key in s.stats
        ])
    return "\n".join(lines) + "\n"
