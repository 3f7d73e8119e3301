"""Start a Flight server from :class:`services.settings.Settings` (CLI, demo, tests).

``start_flight_server(settings)`` binds ``settings.resolved_flight_host()`` on
``settings.flight_port`` (``port=0`` picks a free port), serves in background
threads and returns a :class:`RunningFlightServer`. Every knob (cache budget and wait,
read-ahead, endpoint size, bad-segment policy, ticket lifetime) comes from the
settings, so ``WINDPIPE_*`` variables and CLI flags set them alike, and so does the
host's shared tier of decoded blocks (``tier_dir``, ``tier_bytes``; ``services.materialize.tier``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from catalog.principals import stored_tokens_exist
from catalog.service import CatalogContext
from flight_server.access import (
    CachedAccess,
    DatabaseAccess,
    FlightAccess,
    RestAccess,
    StaticAccess,
)
from flight_server.plan_sources import DatabasePlanSource, PlanCache, PlanSource, RestPlanSource
from flight_server.server import WindpipeFlightServer
from services.database import create_engine
from services.exposure import check_exposure
from services.materialize.cache import ChunkCache
from services.materialize.tier import Tier
from services.planning.artifact import PlanArtifact
from services.settings import Settings, is_loopback
from services.storage.store import StorageOptions, StorageRoots

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
    owned = None
    token = settings.token.get_secret_value() if settings.token else None
    host = settings.resolved_flight_host()
    access: FlightAccess | None = StaticAccess(token) if token else None
    if plan_source is None:
        if engine is None and not settings.catalog_url:
            engine = owned = create_engine(settings.resolved_database_url())
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
    try:
        check_exposure(
            settings, service="Flight server", host=host, signs_tickets=True,
            tokens_configured=lambda: isinstance(access, RestAccess) or (
                engine is not None
                and stored_tokens_exist(CatalogContext.from_engine(engine))),
        )
    except Exception:
        if owned is not None:
            owned.dispose()
        raise
    if access is not None:
        access = CachedAccess(access, ttl_s=settings.auth_cache_s)
    bind_port = settings.flight_port if port is None else port
    cache = ChunkCache(
        settings.cache_bytes if cache_bytes is None else cache_bytes,
        wait_timeout_s=settings.cache_wait_s,
    )
    roots = StorageRoots(StorageOptions.from_settings(settings))
    tier_dir = settings.resolved_tier_dir()
    tier = Tier(tier_dir, budget_bytes=settings.tier_bytes) if tier_dir is not None else None
    server = WindpipeFlightServer(
        f"grpc://{host}:{bind_port}",
        plans=PlanCache(plan_source),
        cache=cache,
        secret=settings.ticket_secret.get_secret_value().encode(),
        storage_for=roots.open,
        locations=tuple(settings.flight_locations),
        on_bad_segment=settings.on_bad_segment,
        endpoint_batches=settings.endpoint_batches,
        readahead_batches=settings.readahead_batches,
        ticket_ttl_s=settings.ticket_ttl_s,
        tier=tier,
        build_ahead_bytes=settings.build_ahead_bytes,
        auto_blocks=settings.auto_blocks,
        access=access,
        limits=settings.limits(),
    )
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    location = settings.flight_public_location or f"grpc://{reachable}:{server.port}"
    return RunningFlightServer(server=server, location=location, _owned_engine=owned)
