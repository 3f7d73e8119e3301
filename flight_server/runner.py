"""Start a Flight server from :class:`services.settings.Settings` (CLI, demo, tests).

``start_flight_server(settings)`` binds ``settings.resolved_flight_host()`` on
``settings.flight_port`` (``port=0`` picks a free port), serves in background
threads and returns a :class:`RunningFlightServer`. Every knob (cache budget and wait,
read-ahead, endpoint size, bad-segment policy, ticket lifetime, the host's shared tier
of decoded blocks) reaches the server as one
:class:`flight_server.config.FlightServerConfig` made from the settings, so
``WINDPIPE_*`` variables and CLI flags set them alike; here the settings only choose
where plans come from and who may read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from catalog.context import CatalogContext
from catalog.principals import stored_tokens_exist
from flight_server.access import (
    CachedAccess,
    DatabaseAccess,
    FlightAccess,
    RestAccess,
    StaticAccess,
)
from flight_server.config import FlightServerConfig
from flight_server.plan_sources import DatabasePlanSource, PlanCache, PlanSource, RestPlanSource
from flight_server.server import WindpipeFlightServer
from services.database import create_engine
from services.exposure import check_exposure
from services.planning.artifact import PlanArtifact
from services.runtime import warm_imports
from services.settings import Settings, is_loopback
from services.storage.packs import PackStore

__all__ = ["RunningFlightServer", "start_flight_server"]


@dataclass
class RunningFlightServer:
    """A started server: ``location`` is its ``grpc://host:port``.

    Unpacks as ``server, location = start_flight_server(...)``.
    """

    server: WindpipeFlightServer
    location: str
    _owned_engine: Engine | None = field(default=None, repr=False)
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


def start_flight_server(
    settings: Settings,
    *,
    engine: Engine | None = None,
    port: int | None = None,
    plan_source: PlanSource | Callable[[str], PlanArtifact] | None = None,
    cache_bytes: int | None = None,
) -> RunningFlightServer:
    """Start serving in background threads; plans come from ``plan_source``, else
    ``engine``, else ``settings.catalog_url`` (REST), else ``settings``' database.

    ``cache_bytes`` overrides ``settings.cache_bytes`` (tests use budgets below the
    settings' 1 MiB floor).
    """
    warm_imports()
    config = FlightServerConfig.from_settings(settings, port=port, cache_bytes=cache_bytes)
    owned = None
    token = settings.token.get_secret_value() if settings.token else None
    host = config.host
    access: FlightAccess | None = StaticAccess(token) if token else None
    if plan_source is None:
        if engine is None and not settings.catalog_url:
            engine = owned = create_engine(
                settings.resolved_database_url(),
                sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s)
        if engine is not None:
            plan_source = DatabasePlanSource(engine)
            access = DatabaseAccess(engine, bootstrap=token,
                                    loopback=is_loopback(host) or settings.insecure)
        else:
            assert settings.catalog_url is not None
            plan_source = RestPlanSource(settings.catalog_url, token=token)
            access = RestAccess(settings.catalog_url)
    elif engine is not None:
        access = DatabaseAccess(engine, bootstrap=token,
                                loopback=is_loopback(host) or settings.insecure)
    rest = access if isinstance(access, RestAccess) else None
    try:
        check_exposure(
            settings, service="Flight server", host=host, signs_tickets=True,
            catalog_decides=rest is not None,  # only the catalog's tokens admit callers
            tokens_configured=rest.requires_tokens if rest is not None else lambda: (
                engine is not None
                and stored_tokens_exist(CatalogContext.from_engine(engine))),
        )
    except Exception:
        if owned is not None:
            owned.dispose()
        raise
    if access is not None:
        access = CachedAccess(access, ttl_s=config.auth_cache_s)
    plans = PlanCache(plan_source, packs=PackStore.from_settings(settings))
    server = WindpipeFlightServer(config, plans=plans, access=access)
    location = config.advertised_location(server.port)
    return RunningFlightServer(server=server, location=location, _owned_engine=owned)
