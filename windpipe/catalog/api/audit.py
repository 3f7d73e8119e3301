"""Request ids and the audit trail, as ASGI middleware.

:func:`request_id_middleware` is asgi-correlation-id's ``CorrelationIdMiddleware``: every
request gets an id, answered as ``X-Request-ID``; an id the caller (or a proxy in front)
sent in that header is kept when it looks like one (16 to 32 hex digits, or a UUID: ours,
nginx's ``$request_id``, a trace id), so one id follows a call across services; anything
else is replaced, so a log line or an audit row never holds what a caller typed.
:class:`LogRequestId` binds the id to every structlog line written while the request
runs (the field ``request_id``), so the details an answer leaves out are found in the
log under that id. :class:`AuditMiddleware` writes one ``audit_events`` row per mutating
call (``POST``, ``PUT``, ``PATCH``, ``DELETE`` under ``/v1``) before its answer leaves:
who (the principal, or ``anonymous`` when authentication failed), what (the operation
id and the path's ids), when, and the status, so a refused or failed attempt is
recorded too.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import anyio.to_thread
import structlog
from asgi_correlation_id import CorrelationIdMiddleware
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from windpipe.catalog import principals
from windpipe.services.contract.text import storable
from windpipe.services.database import is_database_down
from windpipe.services.logging import get_logger

__all__ = [
    "REQUEST_ID_HEADER",
    "AuditMiddleware",
    "LogRequestId",
    "request_id_middleware",
    "request_id_of",
]

REQUEST_ID_HEADER = "x-request-id"
_MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_FOREIGN_ID = re.compile(r"[0-9a-fA-F]{16,32}|[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_log = get_logger("catalog.audit")


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def _acceptable(value: str) -> bool:
    return _FOREIGN_ID.fullmatch(value) is not None


def request_id_middleware(app: ASGIApp, /) -> CorrelationIdMiddleware:
    """asgi-correlation-id's middleware with windpipe's id: 16 hex digits of a UUID4,
    unless the request brings an acceptable one. It writes the id into the request's
    own ``X-Request-ID`` header too, where :func:`request_id_of` reads it."""
    return CorrelationIdMiddleware(app, header_name=REQUEST_ID_HEADER, generator=_new_id,
                                   validator=_acceptable, update_request_header=True)


def request_id_of(scope: Scope) -> str:
    """The id :func:`request_id_middleware` gave this request ('' outside it)."""
    return Headers(scope=scope).get(REQUEST_ID_HEADER, "") if "headers" in scope else ""


class LogRequestId:
    """Binds the request's id to structlog's context (the ``request_id`` field of every
    line) while the request runs; inside :func:`request_id_middleware`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with structlog.contextvars.bound_contextvars(request_id=request_id_of(scope)):
            await self.app(scope, receive, send)


class AuditMiddleware:
    """Records every mutating ``/v1`` call, refused or not, before its answer is sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("method") not in _MUTATIONS
                or not str(scope.get("path", "")).startswith("/v1/")):
            await self.app(scope, receive, send)
            return

        async def _send(message: Message) -> None:
            if message["type"] == "http.response.start":
                await self._record(scope, int(message["status"]))
            await send(message)

        await self.app(scope, receive, _send)

    async def _record(self, scope: Scope, status: int) -> None:
        state: dict[str, Any] = scope.get("state") or {}
        principal = state.get("principal")
        request_id = request_id_of(scope)
        route = scope.get("route")
        action = getattr(route, "operation_id", None) or f"{scope['method']} {scope['path']}"
        params = scope.get("path_params") or {}
        target = storable(",".join(f"{k}={v}" for k, v in sorted(params.items()))) or None
        app = scope.get("app")
        ctx = getattr(getattr(app, "state", None), "catalog", None)
        if ctx is None:
            return
        try:
            await anyio.to_thread.run_sync(lambda: principals.record_audit(
                ctx, principal=principal.name if principal is not None else "anonymous",
                action=action, target=target, status=status,
                request_id=request_id))
        except Exception as exc:
            if is_database_down(exc):  # expected in an outage: no traceback on the event loop
                _log.warning("audit.write_failed", action=action, status=status,
                             request_id=request_id, error=type(exc).__name__)
                return
            _log.exception("audit.write_failed", action=action, status=status,
                           request_id=request_id)
