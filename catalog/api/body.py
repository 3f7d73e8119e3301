"""A bound on request bodies (``WINDPIPE_MAX_BODY_BYTES``), enforced while they arrive.

A declared ``content-length`` above the bound is refused before a byte is read; a
body without one (chunked) is counted as it streams and refused the moment it
passes the bound (the app then sees a client that went away). Either way: 422
``invalid_request`` naming the limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog.api.errors import error_response
from services.contract.limits import limit_error

__all__ = ["BodyLimitMiddleware"]


class _BodyTooLarge(Exception):  # noqa: N818
    """Ends the app's read of a body refused mid-stream (its 422 already sent)."""


class BodyLimitMiddleware:
    """Refuses request bodies larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        err = limit_error("max_body_bytes", size, self.max_bytes, what="request body (bytes)")
        await error_response(err, status=422)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
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
                if seen > self.max_bytes and not started:
                    await self._refuse(scope, receive, send, seen)
                    refused = True
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, _receive, _send)
        except _BodyTooLarge:
            return
