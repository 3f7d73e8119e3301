"""What the servers page shows of each Flight server: health, cache, tier, streams,
throughput and errors, asked now with a short timeout and a bounded fan-out.

Each location is asked, on one client, for ``health`` (with the catalog's token, so the
answer carries the tier's budget) and then ``cache-stats``, each call within
:data:`TIMEOUT_S`; at most :data:`MAX_PARALLEL` locations are asked at once and the whole
fan-out ends by :data:`DEADLINE_S` (what is not done by then is ``unavailable``). A
server that cannot be reached, refuses the token or answers something else is shown
with the typed error it gave, never as a failed page.

Throughput is the difference between two looks: :class:`Samples` keeps, per location,
the last counters the catalog process read (streams started, chunk lookups, bytes read
from storage) and when; the next look divides the growth by the time between. The
first look at a server has no rate. Only counts are kept, for at most
:data:`MAX_SAMPLES` locations.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
from pydantic import ValidationError

from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.reports import CacheCounters, FlightHealth
from windpipe.services.contract.wire import ACTION_CACHE_STATS, ACTION_HEALTH, error_from_flight

__all__ = ["DEADLINE_S", "MAX_PARALLEL", "MAX_SAMPLES", "TIMEOUT_S", "Rates", "Samples",
           "ServerView", "probe_servers"]

TIMEOUT_S = 1.0
DEADLINE_S = 2.5
MAX_PARALLEL = 16
MAX_SAMPLES = 1024


@dataclass(frozen=True)
class Rates:
    """Growth per second since the previous look: streams started, chunk lookups and
    bytes read from storage, over ``seconds``."""

    seconds: float
    streams_per_s: float
    lookups_per_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class ServerView:
    """One location as the page shows it: health and cache (None when the call failed),
    the round trip of ``health`` in ms, the rates, and the error (``type``, ``message``)
    that stopped a call."""

    location: str
    source: str
    health: FlightHealth | None
    cache: CacheCounters | None
    round_trip_ms: float | None
    rates: Rates | None
    error: dict[str, str] | None

    @property
    def hit_ratio(self) -> float | None:
        """Chunk lookups served from the cache, 0..1 (None before any lookup)."""
        if self.cache is None or not self.cache.hits + self.cache.misses:
            return None
        return self.cache.hits / (self.cache.hits + self.cache.misses)


class Samples:
    """The last counters read of each location (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int, int, int]] = {}

    def rate(self, location: str, health: FlightHealth | None,
             cache: CacheCounters | None) -> Rates | None:
        """Record this look and answer the growth since the previous one."""
        if health is None or cache is None:
            return None
        now = time.monotonic()
        sample = (now, health.streams, cache.hits + cache.misses, cache.bytes_read)
        with self._lock:
            before = self._last.get(location)
            if before is None and len(self._last) >= MAX_SAMPLES:
                self._last.pop(next(iter(self._last)))
            self._last[location] = sample
        if before is None or now - before[0] <= 0 or sample[1] < before[1]:
            return None  # the first look, or the server restarted (its counters fell)
        span = now - before[0]
        return Rates(seconds=span, streams_per_s=(sample[1] - before[1]) / span,
                     lookups_per_s=(sample[2] - before[2]) / span,
                     bytes_per_s=(sample[3] - before[3]) / span)


def _error(kind: ErrorType | str, message: str) -> dict[str, str]:
    return {"type": str(kind), "message": message}


def _action(client: fl.FlightClient, kind: str, options: fl.FlightCallOptions) -> Any:
    results = list(client.do_action(fl.Action(kind, b""), options=options))
    return json.loads(results[0].body.to_pybytes()) if results else None


def _probe(location: str, token: str | None,
           ) -> tuple[FlightHealth | None, CacheCounters | None, float | None,
                      dict[str, str] | None]:
    options = fl.FlightCallOptions(timeout=TIMEOUT_S, headers=flight_headers(token))
    try:
        client = fl.FlightClient(location)
    except (fl.FlightError, pa.ArrowException, ValueError, OSError) as exc:
        return None, None, None, _error(ErrorType.INVALID_REQUEST, f"cannot connect: {exc}")
    health = cache = None
    try:
        start = time.perf_counter()
        health = FlightHealth.model_validate(_action(client, ACTION_HEALTH, options))
        trip = (time.perf_counter() - start) * 1e3
        body = _action(client, ACTION_CACHE_STATS, options)
        cache = CacheCounters.model_validate(
            {str(k): int(v) for k, v in body.items() if isinstance(v, (int, float))})
    except (fl.FlightError, OSError) as exc:
        typed = error_from_flight(exc, where=location)
        return health, None, None, _error(typed.type, typed.message)
    except (ValidationError, ValueError, AttributeError):
        return health, None, None, _error(
            ErrorType.INTERNAL, f"{location} answered health or cache-stats with something "
                                "other than windpipe's wire form")
    finally:
        client.close()
    return health, cache, trip, None


def _outcome(future: Future[Any]) -> Any:
    if not future.done():
        return None, None, None, _error(
            ErrorType.UNAVAILABLE, f"no answer within the {DEADLINE_S:g} s the page waits "
                                   "for every Flight server")
    if future.exception() is not None:  # a bug of ours: the other servers still show
        return None, None, None, _error(ErrorType.INTERNAL, "reading this server failed")
    return future.result()


def probe_servers(locations: Sequence[tuple[str, str]], *, token: str | None,
                  samples: Samples) -> list[ServerView]:
    """Every ``(location, source)`` asked now (see the module docstring), in order."""
    if not locations:
        return []
    pool = ThreadPoolExecutor(max_workers=min(len(locations), MAX_PARALLEL),
                              thread_name_prefix="windpipe-ui-servers")
    try:
        futures = [pool.submit(_probe, loc, token) for loc, _ in locations]
        wait(futures, timeout=DEADLINE_S)
        out = []
        for (loc, source), future in zip(locations, futures, strict=True):
            health, cache, trip, error = _outcome(future)
            out.append(ServerView(location=loc, source=source, health=health, cache=cache,
                                  round_trip_ms=trip, rates=samples.rate(loc, health, cache),
                                  error=error))
        return out
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # the calls end by their timeout
