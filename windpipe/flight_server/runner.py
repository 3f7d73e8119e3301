"""Start a Flight server from :class:`windpipe.services.settings.Settings` (CLI, demo, tests).

``start_flight_server(settings, backend=...)`` binds ``settings.resolved_flight_host()``
on ``settings.flight_port`` (``port=0`` picks a free port), serves in background
threads and returns a :class:`RunningFlightServer`. Every knob (cache budget and wait,
read-ahead, endpoint size, bad-segment policy, ticket lifetime, the host's shared tier
of decoded blocks) reaches the server as one
:class:`windpipe.flight_server.config.FlightServerConfig` made from the settings, so
``WINDPIPE_*`` variables and CLI flags set them alike.

Where plans come from and who may read them is the caller's choice, a
:class:`windpipe.flight_server.backend.FlightBackend`: this package never imports the catalog,
so a server reading the catalog database is handed
``windpipe.catalog.flight_adapters.DatabaseBackend`` by whoever may import both (``windpipe
serve``: ``windpipe._serving``). Without one, ``settings.catalog_url`` makes the
REST-backed shape (:class:`windpipe.flight_server.backend.RestBackend`), and a bare
``plan_source`` (tests, a library user) serves its plans to the bootstrap token
(``settings.admin_token``), or to anyone on loopback without one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from windpipe.flight_server.access import CachedAccess, FlightAccess, StaticAccess
from windpipe.flight_server.backend import FlightBackend, RestBackend
from windpipe.flight_server.config import FlightServerConfig
from windpipe.flight_server.metrics import MetricsEndpoint, serve_metrics
from windpipe.flight_server.plan_sources import PlanCache, PlanSource
from windpipe.flight_server.server import WindpipeFlightServer
from windpipe.services.exposure import check_exposure
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.settings import Settings
from windpipe.services.storage.packs import PackStore

__all__ = ["RunningFlightServer", "start_flight_server"]


@dataclass
class RunningFlightServer:
    """A started server: ``location`` is its ``grpc://host:port``.

    Unpacks as ``server, location = start_flight_server(...)``.
    """

    server: WindpipeFlightServer
    location: str
    metrics: MetricsEndpoint | None = None  # its /metrics (settings.flight_metrics_port)
    _backend: FlightBackend | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.server, self.location))

    def stop(self, *, grace_s: float = 10.0) -> bool:
        """End open streams and shut down within ``grace_s`` (idempotent)."""
        if self._stopped:
            return True
        self._stopped = True
        if self.metrics is not None:
            self.metrics.close()
        ok = self.server.stop(grace_s=grace_s)
        if self._backend is not None:
            self._backend.close()
        return ok


def start_flight_server(
    settings: Settings,
    *,
    backend: FlightBackend | None = None,
    port: int | None = None,
    plan_source: PlanSource | Callable[[str], PlanArtifact] | None = None,
    cache_bytes: int | None = None,
) -> RunningFlightServer:
    """Start serving in background threads; plans and access come from ``backend``, else
    from ``settings.catalog_url`` (REST); ``plan_source`` replaces the backend's plans.

    The server owns ``backend`` from here: it is closed when the server stops, or when
    it cannot start. ``cache_bytes`` overrides ``settings.cache_bytes`` (tests use
    budgets below the settings' 1 MiB floor).
    """
    config = FlightServerConfig.from_settings(settings, port=port, cache_bytes=cache_bytes)
    if backend is None and plan_source is None:
        if not settings.catalog_url:
            msg = ("a Flight server needs its plans: set settings.catalog_url (the catalog's "
                   "REST API) or pass backend= (the catalog database: "
                   "windpipe.catalog.flight_adapters.DatabaseBackend, as windpipe serve does)")
            raise ValueError(msg)
        backend = RestBackend.from_settings(settings)
    try:
        return _start(config, settings, backend=backend, plan_source=plan_source)
    except BaseException:
        if backend is not None:
            backend.close()
        raise


def _start(config: FlightServerConfig, settings: Settings, *, backend: FlightBackend | None,
           plan_source: PlanSource | Callable[[str], PlanArtifact] | None,
           ) -> RunningFlightServer:
    access: FlightAccess | None
    if backend is not None:
        access = backend.access
        source = backend.plans if plan_source is None else plan_source
    else:  # plans of the caller's; the bootstrap token, else loopback callers, read them
        assert plan_source is not None  # start_flight_server makes a backend otherwise
        token = settings.admin_token_text()
        access = StaticAccess(token) if token else None
        source = plan_source
    check_exposure(
        settings, service="Flight server", host=config.host, signs_tickets=True,
        # a REST-backed server: only the catalog's tokens admit callers
        catalog_decides=backend is not None and backend.catalog_decides,
        tokens_configured=backend.tokens_configured if backend is not None else lambda: False,
    )
    if access is not None:
        access = CachedAccess(access, ttl_s=settings.auth_cache_s)
    plans = PlanCache(source, packs=PackStore.from_settings(settings))
    server = WindpipeFlightServer(config, plans=plans, access=access)
    location = config.advertised_location(server.port)
    running = RunningFlightServer(server=server, location=location, _backend=backend)
    if settings.flight_metrics_port is not None:
        try:
            running.metrics = serve_metrics(server.metrics.registry, host=config.host,
                                            port=settings.flight_metrics_port)
        except BaseException:
            server.stop(grace_s=1.0)  # the backend is closed by start_flight_server
            raise
    return running
