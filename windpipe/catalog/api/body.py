"""Bounds on request bodies, enforced while they arrive.

Two bounds: ``WINDPIPE_MAX_BODY_BYTES`` for the bodies that are decoded off the event
loop (a registration's, a split statistics request's: ``windpipe/catalog/api/json_body.py``), and
``WINDPIPE_MAX_CONFIG_BODY_BYTES`` for every other call's, which FastAPI decodes on the
event loop (a few KiB of config; tens of MiB would hold every other call for a third of
a second). A declared ``content-length`` above the bound is refused before a byte is
read; a body without one (chunked) is counted as it streams and refused the moment it
passes the bound (the app then sees a client that went away). Either way: 422
``invalid_request`` naming the limit.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from windpipe.catalog.api.errors import error_response
from windpipe.services.contract.limits import limit_error

__all__ = ["BodyLimitMiddleware"]


class _BodyTooLarge(Exception):  # noqa: N818
    """Ends the app's read of a body refused mid-stream (its 422 already sent)."""


# the routes whose bodies are read off the event loop (JsonBodyRoute): the larger bound
_BULK_BODIES = re.compile(r"^/v1/(datasets/[^/]+/versions|splits/[^/]+/stats)/?$")


class BodyLimitMiddleware:
    """Refuses request bodies larger than their route's bound (the module docstring)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_config_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_config_bytes = min(max_config_bytes, max_bytes)

    def _bound(self, scope: Scope) -> tuple[str, int]:
        if _BULK_BODIES.match(scope.get("path", "")):
            return "max_body_bytes", self.max_bytes
        return "max_config_body_bytes", self.max_config_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        limit, bound = self._bound(scope)
        err = limit_error(limit, size, bound, what="request body (bytes)")
        await error_response(err, status=422)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        _limit, bound = self._bound(scope)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > bound:
                    await self._refuse(scope, receive, send, declared)
                    return
        seen = 0
        refused = False
        started = False

        async def _send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 422 already went out; the app's own answer is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def _receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > bound and not started:
                    await self._refuse(scope, receive, send, seen)
                    refused = True
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, _receive, _send)
        except _BodyTooLarge:
            return
