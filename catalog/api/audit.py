"""Request ids and the audit trail, as ASGI middleware.

:class:`RequestIdMiddleware` gives every request an id (``X-Request-ID`` on every
answer) and binds it to every log line written while the request runs, so the details
an answer leaves out are found in the log under that id. :class:`AuditMiddleware`
writes one ``audit_events`` row per mutating call (``POST``, ``PUT``, ``PATCH``,
``DELETE`` under ``/v1``) before its answer leaves: who (the principal, or
``anonymous`` when authentication failed), what (the operation id and the path's
ids), when, and the status, so a refused or failed attempt is recorded too.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio.to_thread
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog import principals
from services.database import is_database_down
from services.logging import get_logger

__all__ = ["REQUEST_ID_HEADER", "AuditMiddleware", "RequestIdMiddleware", "request_id_of"]

REQUEST_ID_HEADER = "x-request-id"
_MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_log = get_logger("catalog.audit")


def request_id_of(scope: Scope) -> str:
    """The id :class:`RequestIdMiddleware` gave this request ('' outside it)."""
    state = scope.get("state")
    return str(state.get("request_id", "")) if isinstance(state, dict) else ""


class RequestIdMiddleware:
    """Assigns ``scope["state"]["request_id"]`` and answers it as ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = request_id

        async def _send(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            await self.app(scope, receive, _send)


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
        route = scope.get("route")
        action = getattr(route, "operation_id", None) or f"{scope['method']} {scope['path']}"
        params = scope.get("path_params") or {}
        target = ",".join(f"{k}={v}" for k, v in sorted(params.items())) or None
        app = scope.get("app")
        ctx = getattr(getattr(app, "state", None), "catalog", None)
        if ctx is None:
            return
        try:
            await anyio.to_thread.run_sync(lambda: principals.record_audit(
                ctx, principal=principal.name if principal is not None else "anonymous",
                action=action, target=target, status=status,
                request_id=str(state.get("request_id", ""))))
        except Exception as exc:
            if is_database_down(exc):  # expected in an outage: no traceback on the event loop
                _log.warning("audit.write_failed", action=action, status=status,
                             request_id=state.get("request_id"), error=type(exc).__name__)
                return
            _log.exception("audit.write_failed", action=action, status=status,
                           request_id=state.get("request_id"))
