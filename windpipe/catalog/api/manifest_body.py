"""Inline manifest rows counted in the raw body, before any of them is decoded; the body
decoded off the event loop.

``POST /v1/datasets/{name}/versions`` may carry its manifest as ``rows``: JSON objects,
one per row. Decoding builds a Python dict per row (hundreds of bytes each, twice over
with validation), so a body of a few MiB of ``{}`` would cost far more memory than its
size. :class:`ManifestBodyRoute` counts the objects in the raw bytes first and refuses
more than ``WINDPIPE_MAX_MANIFEST_ROWS`` rows with the 422 ``invalid_manifest`` naming
that limit, before the body is decoded.

A registration body holds one object of its own and one per row (metadata is scalar,
unknown fields are refused), so ``objects - 1`` bounds its rows from above. Counting
``{`` is the fast path; only when that passes the limit are the braces inside strings
taken out (a regular expression, a MiB at a time: one pass over tens of MiB would hold
the GIL, and the event loop, for a second or more) to count exactly.

Then the body is decoded in the same worker thread, and validated by the endpoint in
another (:class:`windpipe.catalog.api.json_body.JsonBodyRoute`).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request

from windpipe.catalog.api.json_body import JsonBodyRoute
from windpipe.catalog.api.schemas import RegisterVersionIn
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.limits import Limits, check_limit

__all__ = ["ManifestBodyRoute", "check_inline_rows", "json_objects"]

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
# text and whole strings, up to a string that does not close within the slice
_UNTIL_OPEN_STRING = re.compile(rb'(?:[^"]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+')
_SLICE = 1 << 20


def json_objects(body: bytes, *, exact: bool = True) -> int:
    """The JSON objects in ``body`` (``{`` outside strings; ``exact=False``: every ``{``,
    an upper bound). The exact count reads a slice of about a MiB at a time, cut where
    no string is open, and equals one pass of the string pattern over the whole body."""
    if not exact:
        return body.count(b"{")
    count, at = 0, 0
    while at < len(body):
        until = _UNTIL_OPEN_STRING.match(body, at, at + _SLICE)
        assert until is not None  # it matches the empty string
        end = until.end()
        count += _STRING.sub(b"", body[at:end]).count(b"{")
        if end < min(at + _SLICE, len(body)):  # a string opens at ``end``
            string = _STRING.match(body, end)
            if string is None:  # it never closes: that quote is text, as in one pass
                return count + _STRING.sub(b"", body[end + 1:]).count(b"{")
            end = string.end()
        at = end
    return count


def check_inline_rows(objects: int, limits: Limits) -> None:
    """Refuse a registration body with more objects than ``1 + max_manifest_rows``."""
    check_limit("max_manifest_rows", max(objects - 1, 0), limits.max_manifest_rows,
                what="manifest rows (objects in the request body)",
                kind=ErrorType.INVALID_MANIFEST)


class ManifestBodyRoute(JsonBodyRoute):
    """The registration route: its body's inline rows are counted before it is decoded
    (both in a worker thread)."""

    body_model = RegisterVersionIn

    def read_json(self, request: Request, body: bytes) -> Any:
        """``body`` decoded, once its objects are known to be within the limit."""
        limits: Limits = request.app.state.catalog.limits
        if json_objects(body, exact=False) - 1 > limits.max_manifest_rows:
            check_inline_rows(json_objects(body), limits)
        return super().read_json(request, body)
