"""Inline manifest rows counted in the raw body, before any of them is decoded.

``POST /v1/datasets/{name}/versions`` may carry its manifest as ``rows``: JSON objects,
one per row. Decoding builds a Python dict per row (hundreds of bytes each, twice over
with validation), so a body of a few MiB of ``{}`` would cost far more memory than its
size. :class:`ManifestBodyRoute` counts the objects in the raw bytes first and refuses
more than ``WINDPIPE_MAX_MANIFEST_ROWS`` rows with the 422 ``invalid_manifest`` naming
that limit, before the body is decoded.

A registration body holds one object of its own and one per row (metadata is scalar,
unknown fields are refused), so ``objects - 1`` bounds its rows from above. Counting
``{`` is the fast path; only when that passes the limit are the braces inside strings
taken out (a regular expression, off the event loop) to count exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any

import anyio.to_thread
from fastapi import Request, Response
from fastapi.routing import APIRoute

from services.contract.errors import ErrorType
from services.contract.limits import Limits, check_limit

__all__ = ["ManifestBodyRoute", "check_inline_rows", "json_objects"]

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_objects(body: bytes, *, exact: bool = True) -> int:
    """The JSON objects in ``body`` (``{`` outside strings; ``exact=False``: every ``{``,
    an upper bound)."""
    if not exact:
        return body.count(b"{")
    return _STRING.sub(b"", body).count(b"{")


def check_inline_rows(objects: int, limits: Limits) -> None:
    """Refuse a registration body with more objects than ``1 + max_manifest_rows``."""
    check_limit("max_manifest_rows", max(objects - 1, 0), limits.max_manifest_rows,
                what="manifest rows (objects in the request body)",
                kind=ErrorType.INVALID_MANIFEST)


class ManifestBodyRoute(APIRoute):
    """A route whose body's inline rows are counted before FastAPI decodes it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler behind the count (the body is read once: Starlette keeps
        it for the handler)."""
        handler = super().get_route_handler()

        async def counted(request: Request) -> Response:
            limits: Limits = request.app.state.catalog.limits
            body = await request.body()
            if json_objects(body, exact=False) - 1 > limits.max_manifest_rows:
                objects = await anyio.to_thread.run_sync(json_objects, body)
                check_inline_rows(objects, limits)
            return await handler(request)

        return counted
