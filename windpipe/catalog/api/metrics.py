"""The catalog's HTTP metrics: requests and their latency by route template, per app.

Written with ``prometheus_client`` (the Prometheus project's own Python client) rather
than by hand: it keeps the counters thread-safe, writes the exposition format (text or
OpenMetrics) and escapes labels. Each app has its own :class:`HttpMetrics` registry, not
the library's global default one, so several catalogs in one process (tests, an
embedded catalog next to a served one) count apart. ``/metrics``
(``windpipe.catalog.api.routes.flight``) serves it with the catalog counts and the Flight
servers' cache statistics.

The ``route`` label is the matched route's path template (``/v1/plans/{plan_id}``), never
the raw path, so the label set stays as small as the API; a path no route matches is
``unmatched``. The template comes from the route Starlette's router puts in the ASGI
scope (``scope["route"]``), with the prefix of the router that included it (FastAPI's
public ``iter_route_contexts``; older FastAPI copies included routes with the prefix).

The registry also holds what an operator reads of the process itself: its RSS, open
files and CPU time (``prometheus_client``'s ``process_*`` collector: Linux's ``/proc``)
and the storage reads made in it (``windpipe_storage_read_seconds``, process-wide:
``windpipe.services.timings``; a registration's segment inspections).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from windpipe.services.timings import collector as services_timings

__all__ = [
    "HTTP_BUCKETS", "UNMATCHED", "HttpMetrics", "RequestMetricsMiddleware", "route_templates",
]

UNMATCHED = "unmatched"

# seconds: a cached read answers in a millisecond, a plan of a large split or a
# registration that waits on the store in seconds
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0)


class HttpMetrics:
    """``windpipe_http_requests_total`` (method, route, status),
    ``windpipe_http_request_duration_seconds`` (method, route), the process's
    ``process_*`` figures and its storage reads, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "windpipe_http_requests", "HTTP requests answered, by method, route template "
            "and status", ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram(
            "windpipe_http_request_duration_seconds", "seconds from a request's arrival to "
            "the end of its answer, by method and route template", ["method", "route"],
            buckets=HTTP_BUCKETS, registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.registry.register(services_timings())

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)


def route_templates(app: Any) -> dict[int, str]:
    """``id(route) -> full path template`` of every route of ``app`` that a router
    included under a prefix (FastAPI keeps the route itself without it)."""
    try:
        from fastapi.routing import iter_route_contexts  # noqa: PLC0415
    except ImportError:  # FastAPI before nested routers: routes carry their full path
        return {}
    return {id(ctx.original_route): ctx.path_format
            for ctx in iter_route_contexts(getattr(app, "routes", []))
            if isinstance(ctx.path_format, str)}


class RequestMetricsMiddleware:
    """Counts and times every answered request (outermost, so the 500s of the error
    middleware are counted too)."""

    def __init__(self, app: ASGIApp, *, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._templates: dict[int, str] | None = None  # built at the first request

    def _route(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is None:
            return UNMATCHED
        if self._templates is None:
            self._templates = route_templates(scope.get("app"))
        template = self._templates.get(id(route)) or getattr(route, "path_format", None)
        return template if isinstance(template, str) and template else UNMATCHED

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def _send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            self.metrics.observe(method=str(scope.get("method", "")), route=self._route(scope),
                                 status=status, seconds=time.perf_counter() - started)
