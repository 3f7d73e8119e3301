"""The served Flight server wired to its catalog: :func:`serve_flight`.

The Flight server (``flight_server``) and the catalog (``catalog``) do not import each
other; a Flight server that reads the catalog database is handed the catalog's
adapters (``windpipe.catalog.flight_adapters.DatabaseBackend``) here, in the top layer, which
may import both. ``windpipe serve``, the demo and the tests start their Flight servers
through this one function, so every one of them chooses its backend alike.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Engine

from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.flight_server.plan_sources import PlanSource
from windpipe.flight_server.runner import RunningFlightServer, start_flight_server
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.settings import Settings

__all__ = ["serve_flight"]


def serve_flight(
    settings: Settings,
    *,
    engine: Engine | None = None,
    port: int | None = None,
    plan_source: PlanSource | Callable[[str], PlanArtifact] | None = None,
    cache_bytes: int | None = None,
) -> RunningFlightServer:
    """Start a Flight server whose plans come from ``plan_source``, else ``engine``'s
    database, else ``settings.catalog_url`` (REST), else ``settings``' database.

    Tokens and plan access are the database's whenever an ``engine`` is given or the
    settings' database serves the plans; the REST-backed server asks the catalog; a bare
    ``plan_source`` admits the bootstrap token (``settings.admin_token``), or without one every
    caller on this host.
    ``cache_bytes`` overrides ``settings.cache_bytes`` (tests use budgets below the
    settings' 1 MiB floor).
    """
    backend = None
    if engine is not None or (plan_source is None and not settings.catalog_url):
        backend = DatabaseBackend.from_settings(settings, engine=engine)
    return start_flight_server(settings, backend=backend, port=port,
                               plan_source=plan_source, cache_bytes=cache_bytes)
