"""What the resource routes share: the answer of an idempotent create (201, or 200 when
it existed) and the offset tokens of the lists paged by position (a plan's schedule, an
index).

A list paged by key (datasets, versions, segments, audit events) takes its tokens from
:mod:`windpipe.catalog.repository`; these are the ones whose token is the position of the next
item.
"""

from __future__ import annotations

from typing import TypeVar

from fastapi import Response, status

from windpipe.catalog.paging import decode_page_token, encode_page_token
from windpipe.catalog.service import Created

__all__ = ["created_or_found", "next_offset_token", "page_offset"]

T = TypeVar("T")


def created_or_found(response: Response, result: Created[T]) -> T:
    """``result``'s value, answered 201 (the route's status) when this call created it and
    200 when it existed already (the same content: the same id)."""
    if not result.created:
        response.status_code = status.HTTP_200_OK
    return result.value


def page_offset(page_token: str | None) -> int:
    """The position ``page_token`` resumes at (0 for the first page); a bounded int
    (0 .. 2**63-1), past the end of a list included."""
    key = decode_page_token(page_token, shape=(int,))
    return int(key[0]) if key else 0


def next_offset_token(end: int, total: int) -> str | None:
    """The token of the page after one that ended before ``end``; None on the last page."""
    return encode_page_token([end]) if end < total else None
