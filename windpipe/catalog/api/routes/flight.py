"""The Flight servers seen from the catalog: cache statistics as JSON and as Prometheus text."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from windpipe.catalog.api.auth import require
from windpipe.catalog.api.deps import AppSettings, Context, Discovery
from windpipe.catalog.api.metrics import HttpMetrics
from windpipe.catalog.api.schemas import FlightStatsOut
from windpipe.catalog.flight_stats import catalog_table_rows, fetch_cache_stats, render_metrics
from windpipe.services.contract.principals import Role
from windpipe.services.settings import Settings

__all__ = ["DEFAULT_TIMEOUT_S", "metrics", "v1"]

v1 = APIRouter(tags=["flight"])
_READ = [Depends(require(Role.READER))]
metrics = APIRouter(tags=["metrics"])

DEFAULT_TIMEOUT_S = 2.0

TimeoutS = Annotated[
    float, Query(gt=0, le=30, description="seconds to wait for each Flight server")
]


def _token(settings: Settings) -> str | None:
    return settings.admin_token_text()


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
    responses={200: {"description": "Prometheus text format 0.0.4 (OpenMetrics when the "
                                    "Accept header asks for it)",
                     "content": {"text/plain": {}, "application/openmetrics-text": {}}}},
)
def get_metrics(request: Request, ctx: Context, settings: AppSettings,
                discovery: Discovery) -> Response:
    """Catalog object counts, HTTP requests (counts and latency by route template) and
    every Flight server's cache statistics."""
    http: HttpMetrics = request.app.state.metrics
    servers = fetch_cache_stats(discovery.locations(), timeout_s=DEFAULT_TIMEOUT_S,
                                token=_token(settings))
    body, content_type = render_metrics(
        table_rows=catalog_table_rows(ctx), servers=servers, http=http.registry,
        accept=request.headers.get("accept"))
    return Response(content=body, headers={"content-type": content_type})
