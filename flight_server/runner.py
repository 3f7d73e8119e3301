"""Start a Flight server from :class:`services.settings.Settings` (CLI, demo, tests).

``start_flight_server(settings)`` binds ``settings.resolved_flight_host()`` on
``settings.flight_port`` (``port=0`` picks a free port), serves in background
threads and returns a :class:`RunningFlightServer`; ``serve_flight(settings)``
runs one in the foreground until SIGTERM/SIGINT.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from catalog.storage import Storage
from flight_server.cache import ChunkCache
from flight_server.materialize import BadSegmentPolicy
from flight_server.plans import (
    DatabasePlanSource,
    PlanCache,
    PlanContext,
    PlanSource,
    RestPlanSource,
)
from flight_server.server import WindpipeFlightServer
from services.settings import Settings

__all__ = ["RunningFlightServer", "serve_flight", "start_flight_server"]


@dataclass
class RunningFlightServer:
    """A started server: ``location`` is its ``grpc://host:port``.

    Unpacks as ``server, location = start_flight_server(...)``.
    """

    server: WindpipeFlightServer
    location: str
    _owned_engine: Any = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.server, self.location))

    def stop(self, *, grace_s: float = 10.0) -> bool:
        """End open streams and shut down within ``grace_s`` (idempotent)."""
        if self._stopped:
            return True
        self._stopped = True
        ok = self.server.stop(grace_s=grace_s)
        if self._owned_engine is not None:
            self._owned_engine.dispose()
        return ok


class _StorageRegistry:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._roots: dict[str, Storage] = {}
        self._lock = threading.Lock()

    def __call__(self, uri: str) -> Storage:
        with self._lock:
            storage = self._roots.get(uri)
            if storage is None:
                storage = Storage.from_uri(
                    uri, s3_endpoint=self._settings.s3_endpoint,
                    s3_region=self._settings.s3_region,
                    s3_allow_http=self._settings.s3_allow_http,
                )
                self._roots[uri] = storage
            return storage


def start_flight_server(
    settings: Settings,
    *,
    engine: Any = None,
    port: int | None = None,
    plan_source: PlanSource | Callable[[str], PlanContext] | None = None,
    on_bad_segment: BadSegmentPolicy = "raise",
    endpoint_batches: int = 64,
    readahead_batches: int = 2,
    wait_timeout_s: float = 30.0,
    cache_bytes: int | None = None,
) -> RunningFlightServer:
    """Start serving in background threads; plans come from ``plan_source``, else
    ``engine``, else ``settings.catalog_url`` (REST), else ``settings``' database.

    ``cache_bytes`` overrides ``settings.cache_bytes`` (tests use tiny budgets).
    """
    owned = None
    if plan_source is None:
        if engine is not None:
            plan_source = DatabasePlanSource(engine)
        elif settings.catalog_url:
            token = settings.token.get_secret_value() if settings.token else None
            plan_source = RestPlanSource(settings.catalog_url, token=token)
        else:
            from services.database import create_engine  # noqa: PLC0415

            owned = create_engine(settings.resolved_database_url())
            plan_source = DatabasePlanSource(owned)
    host = settings.resolved_flight_host()
    bind_port = settings.flight_port if port is None else port
    cache = ChunkCache(
        settings.cache_bytes if cache_bytes is None else cache_bytes,
        wait_timeout_s=wait_timeout_s,
    )
    server = WindpipeFlightServer(
        f"grpc://{host}:{bind_port}",
        plans=PlanCache(plan_source),
        cache=cache,
        secret=settings.ticket_secret.get_secret_value().encode(),
        storage_for=_StorageRegistry(settings),
        locations=tuple(settings.flight_locations),
        on_bad_segment=on_bad_segment,
        endpoint_batches=endpoint_batches,
        readahead_batches=readahead_batches,
        token=settings.token.get_secret_value() if settings.token else None,
    )
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    location = settings.flight_public_location or f"grpc://{reachable}:{server.port}"
    return RunningFlightServer(server=server, location=location, _owned_engine=owned)


def serve_flight(settings: Settings) -> None:
    """Run a Flight server until SIGTERM or SIGINT, then stop within the grace period."""
    running = start_flight_server(settings)
    print(f"windpipe flight ready at {running.location}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    running.stop(grace_s=settings.shutdown_grace_s)
