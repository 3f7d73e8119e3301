"""Bearer tokens on the wire: one header and one scheme for REST and Flight.

Clients send ``authorization: Bearer <token>`` on every call (HTTP header or gRPC
metadata); servers compare in constant time. Both directions live here so the SDK,
the catalog, the Flight server and the catalog's own Flight calls agree.
"""

from __future__ import annotations

import hmac

__all__ = ["AUTH_HEADER", "bearer_matches", "bearer_token", "flight_headers", "http_headers"]

AUTH_HEADER = "authorization"
_SCHEME = "bearer"


def http_headers(token: str | None) -> dict[str, str]:
    """The HTTP headers that carry ``token`` (none without one)."""
    return {AUTH_HEADER: f"Bearer {token}"} if token else {}


def flight_headers(token: str | None) -> list[tuple[bytes, bytes]]:
    """The gRPC metadata that carries ``token`` (``FlightCallOptions(headers=...)``)."""
    return [(AUTH_HEADER.encode(), f"Bearer {token}".encode())] if token else []


def bearer_matches(value: str | bytes | None, token: str) -> bool:
    """Whether an ``authorization`` header value is ``Bearer <token>`` (constant time)."""
    if not value:
        return False
    raw = value.encode() if isinstance(value, str) else bytes(value)
    scheme, _, given = raw.partition(b" ")
    return scheme.lower() == _SCHEME.encode() and hmac.compare_digest(
        given.strip(), token.encode()
    )


def bearer_token(value: str | bytes | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` value; None for no or another scheme."""
    if not value:
        return None
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    scheme, _, given = text.partition(" ")
    given = given.strip()
    return given if scheme.lower() == _SCHEME and given else None
