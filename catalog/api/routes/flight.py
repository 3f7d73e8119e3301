"""The Flight servers seen from the catalog: cache statistics as JSON and as Prometheus text."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from catalog.api.auth import require
from catalog.api.deps import AppSettings, Context, Discovery
from catalog.api.schemas import FlightStatsOut
from catalog.flight_stats import (
    PROMETHEUS_CONTENT_TYPE,
    RequestCounter,
    catalog_table_rows,
    fetch_cache_stats,
    render_metrics,
)
from catalog.principals import Role
from services.settings import Settings

__all__ = ["DEFAULT_TIMEOUT_S", "metrics", "v1"]

v1 = APIRouter(tags=["flight"])
_READ = [Depends(require(Role.READER))]
metrics = APIRouter(tags=["metrics"])

DEFAULT_TIMEOUT_S = 2.0

TimeoutS = Annotated[
    float, Query(gt=0, le=30, description="seconds to wait for each Flight server")
]


def _token(settings: Settings) -> str | None:
    return settings.token.get_secret_value() if settings.token is not None else None


@v1.get(
    "/flight/stats", operation_id="get_flight_stats", dependencies=_READ,
    response_model=FlightStatsOut,
    response_model_exclude_none=True,
)
def get_flight_stats(
    settings: AppSettings, discovery: Discovery, timeout_s: TimeoutS = DEFAULT_TIMEOUT_S
) -> FlightStatsOut:
    """The chunk-cache counters of every Flight server, configured or discovered
    (``cache-stats`` action).

    Always 200: a server that does not answer within ``timeout_s`` is listed with an
    ``error`` (``unavailable``, ``unauthenticated``, ...) instead of ``stats``.
    """
    servers = fetch_cache_stats(discovery.locations(), timeout_s=timeout_s,
                                token=_token(settings))
    return FlightStatsOut.model_validate({"servers": [s.as_dict() for s in servers]})


@metrics.get(
    "/metrics", operation_id="get_metrics", dependencies=_READ,
    responses={200: {"description": "Prometheus text format 0.0.4",
                     "content": {"text/plain": {}}}},
)
def get_metrics(request: Request, ctx: Context, settings: AppSettings,
                discovery: Discovery) -> Response:
    """Catalog object counts, HTTP requests and every Flight server's cache statistics."""
    counter: RequestCounter = request.app.state.requests
    servers = fetch_cache_stats(discovery.locations(), timeout_s=DEFAULT_TIMEOUT_S,
                                token=_token(settings))
    text = render_metrics(table_rows=catalog_table_rows(ctx), requests=counter.snapshot(),
                          servers=servers)
    return Response(content=text, media_type=PROMETHEUS_CONTENT_TYPE)
