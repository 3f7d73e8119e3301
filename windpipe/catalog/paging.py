"""Keyset pagination of the catalog's lists: pages and their opaque tokens.

A page token is the URL-safe base64 of the JSON list of the last key of the previous
page (padding stripped); :func:`decode_page_token` refuses one whose key does not have
the listing's shape. :mod:`windpipe.catalog.repository` re-exports these names.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from windpipe.services.contract.errors import InvalidRequest

__all__ = ["Page", "decode_page_token", "encode_page_token", "page_of"]

T = TypeVar("T")


def encode_page_token(key: Sequence[Any]) -> str:
    """The opaque page token of ``key`` (the last key of a page)."""
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_token(token: str | None, *, shape: tuple[type, ...]) -> list[Any] | None:
    """The key a page token stands for; ``invalid_request`` if it is not one of ours.

    ``shape`` is the key's element types (``int`` elements must be non-negative), so a
    well-formed token of another listing, or a hand-made one, is refused here instead
    of failing deep in a query.
    """
    if token is None or token == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        key = None
    if not _key_has_shape(key, shape):
        raise InvalidRequest(
            f"page_token {token!r} is not a valid page token",
            details={"page_token": token},
        )
    return list(key)


def _key_has_shape(key: Any, shape: tuple[type, ...]) -> bool:
    if not isinstance(key, list) or len(key) != len(shape):
        return False
    for value, typ in zip(key, shape, strict=True):
        if typ is int:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
                return False
        elif not isinstance(value, typ):
            return False
    return True


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: its items and the token of the next page (None at the end)."""

    items: list[T]
    next_page_token: str | None


def page_of(rows: list[T], page_size: int, key: Any) -> Page[T]:
    """The page of ``rows`` (fetched with one row more than ``page_size``): the next
    page's token is ``key`` of its last item when there are more rows."""
    if len(rows) > page_size:
        rows = rows[:page_size]
        return Page(rows, encode_page_token(key(rows[-1])))
    return Page(rows, None)
