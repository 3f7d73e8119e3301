"""The catalog REST app: ``create_app(settings)``; its lifespan owns the database engine.

Nothing connects at import. On start-up the lifespan creates the engine (unless one
is passed in, as tests do), migrates the database to the newest schema (Alembic
``upgrade head``; a no-op when it is current) and builds the :class:`CatalogContext`
the routes use and the registrations' own threads
(:class:`windpipe.catalog.api.storage_pool.StoragePool`); on shut-down it disposes of the engine
it created.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline
from sqlalchemy.engine import Engine

from windpipe.catalog.api.audit import AuditMiddleware, LogRequestId, request_id_middleware
from windpipe.catalog.api.auth import authenticate
from windpipe.catalog.api.body import BodyLimitMiddleware
from windpipe.catalog.api.errors import install_error_handlers
from windpipe.catalog.api.json_body import document_json_bodies
from windpipe.catalog.api.metrics import HttpMetrics, RequestMetricsMiddleware
from windpipe.catalog.api.routes import (
    access,
    datasets,
    flight,
    health,
    jobs,
    plans,
    splits,
    versions,
)
from windpipe.catalog.api.schemas import RegisterVersionIn
from windpipe.catalog.api.storage_pool import StoragePool
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.jobs import Jobs
from windpipe.catalog.ui import mount_ui
from windpipe.migrations import upgrade_engine
from windpipe.services.contract.stats import StatsRequest
from windpipe.services.database import create_engine
from windpipe.services.settings import Settings
from windpipe.services.storage.packs import PackStore
from windpipe.services.storage.roots import RootScopes
from windpipe.services.storage.store import StorageOptions
from windpipe.services.tracing import tracing_enabled

__all__ = ["create_app", "server_version"]


def server_version() -> str:
    """The installed windpipe version."""
    try:
        return version("windpipe")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


def create_app(settings: Settings | None = None, *, engine: Engine | None = None,
               storage: StorageOptions | None = None) -> FastAPI:
    """The FastAPI app; pass ``engine`` to share one (the caller then disposes of it).

    ``storage``: how registrations open dataset roots, instead of the settings' (an
    embedded catalog, ``windpipe.embedded``, passes ``allowed=None``: its user is the
    operator and may register any root they can read).
    """
    settings = settings or Settings()
    storage_options = storage if storage is not None else StorageOptions.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = engine is None
        bound = engine if engine is not None else create_engine(
            settings.resolved_database_url(),
            sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s,
        )
        app.state.ready_pool = ThreadPoolExecutor(2, thread_name_prefix="windpipe-readyz")
        app.state.storage_pool = StoragePool(workers=settings.storage_workers,
                                             queue=settings.storage_queue)
        packs = PackStore.from_settings(settings)
        packs.sweep()  # what a registration killed a day ago or more left half-written
        try:
            upgrade_engine(bound)
            app.state.engine = bound
            app.state.catalog = CatalogContext.from_engine(
                bound, storage=storage_options,
                cache_bytes=settings.schedule_cache_bytes, limits=settings.limits(),
                root_scopes=RootScopes.parse(settings.root_scopes),
                packs=packs,
            )
            app.state.jobs = Jobs(app.state.catalog.sessions, app.state.storage_pool.submit,
                                  stale_after_s=settings.job_stale_s,
                                  retention_s=settings.job_retention_s)
            yield
        finally:
            if hasattr(app.state, "jobs"):
                app.state.jobs.close()
            app.state.ready_pool.shutdown(wait=False, cancel_futures=True)
            app.state.storage_pool.shutdown()
            if own:
                bound.dispose()

    # Swagger UI (/docs) and ReDoc (/redoc) from assets served here, not from a CDN:
    # they work offline and behind an air gap
    app = FastAPIOffline(
        title="windpipe catalog",
        version=server_version(),
        description="Datasets, versions, ML indexes, splits and window plans.",
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry spans (one server span per request, named by its
        # route template, with spans of its dependencies and endpoint; the caller's
        # traceparent as parent) only while windpipe's tracing is on (services.tracing);
        # metrics are Prometheus's here (api.metrics), logs structlog's
        telemetry={"tracing": tracing_enabled(), "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.metrics = HttpMetrics()  # this app's own registry (``/metrics``)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       max_config_bytes=settings.max_config_body_bytes)
    install_error_handlers(app)
    app.add_middleware(AuditMiddleware)
    app.add_middleware(LogRequestId)
    app.add_middleware(request_id_middleware)  # outside the two above: they read its id
    app.add_middleware(RequestMetricsMiddleware, metrics=app.state.metrics)
    app.include_router(health.router)
    secured = [Depends(authenticate)]
    app.include_router(flight.metrics, dependencies=secured)
    for module in (health, datasets, jobs, versions, splits, plans, flight, access):
        app.include_router(module.v1, prefix="/v1", dependencies=secured)
    document_json_bodies(app, RegisterVersionIn, StatsRequest)  # read by their routes
    mount_ui(app)  # the read-only pages under /ui (docs/ui.md)
    return app
