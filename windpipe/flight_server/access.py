"""Who a Flight caller is and whether it may read a plan: :class:`FlightAccess`.

The protocol is the Flight server's; what implements it is chosen by whoever starts
the server (``windpipe.flight_server.runner``):

* :class:`RestAccess`: the Flight server knows only the catalog's URL; it asks the
  catalog with the *caller's* token: ``GET /v1/whoami`` (who) and ``GET
  /v1/plans/{id}`` (may this caller read this plan: 200, 401 or 403), so the catalog's
  rules are the only rules.
* ``windpipe.catalog.flight_adapters.DatabaseAccess``: the Flight server reads the catalog
  database (plans too), so it checks stored tokens and plan ownership with the
  catalog's own functions; the CLI wires it in, this package never imports the catalog.
* :class:`StaticAccess`: a server given only a bootstrap token (tests, a library user).

:class:`CachedAccess` wraps either and trusts a positive answer for ``ttl_s`` seconds
(``Settings.auth_cache_s``, default 30): a revoked token or a narrowed scope is refused
by every Flight server within that bound. Entries are keyed by the token's SHA-256
(never the token) and bounded in number, so the cache holds at most a few hundred KiB.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import OrderedDict
from typing import Protocol

import httpx

from windpipe.services.contract.auth import http_headers
from windpipe.services.contract.errors import (
    Unauthenticated,
    Unavailable,
    WindpipeError,
    error_from_envelope,
)
from windpipe.services.contract.principals import BOOTSTRAP, Principal, Role, hash_token
from windpipe.services.contract.shapes import check_plan_id
from windpipe.services.logging import get_logger
from windpipe.services.tracing import trace_headers

__all__ = ["CachedAccess", "FlightAccess", "RestAccess", "StaticAccess"]

_log = get_logger("windpipe.flight.access")
_NEEDS_TOKEN = ("this Flight server requires a bearer token: send the header "
                "'authorization: Bearer <token>' (sdk: Catalog(url, token=...))")


class FlightAccess(Protocol):
    """Authentication and plan authorization for Flight calls."""

    def authenticate(self, token: str | None) -> Principal:
        """The caller's principal, else ``unauthenticated``."""
        ...

    def authorize_plan(self, token: str | None, principal: Principal, plan_id: str) -> None:
        """Return if ``principal`` may read ``plan_id``, else raise ``forbidden``."""
        ...


class StaticAccess:
    """Only the bootstrap token (an admin) is accepted."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap

    def authenticate(self, token: str | None) -> Principal:
        """The bootstrap admin for the right token."""
        if token is None:
            raise Unauthenticated(_NEEDS_TOKEN)
        if not hmac.compare_digest(token.encode(), self._bootstrap.encode()):
            raise Unauthenticated("the bearer token sent to this Flight server is not valid")
        return Principal(BOOTSTRAP, Role.ADMIN)

    def authorize_plan(self, token: str | None, principal: Principal, plan_id: str) -> None:
        """An admin reads every plan."""


class RestAccess:
    """The catalog decides, asked with the caller's own token."""

    def __init__(self, catalog_url: str, *, timeout_s: float = 10.0) -> None:
        self._base = catalog_url.rstrip("/")
        self._timeout = timeout_s

    def _get(self, path: str, token: str | None) -> httpx.Response:
        try:
            return httpx.get(f"{self._base}{path}",  # in the caller's trace, if traced
                             headers={**http_headers(token), **trace_headers()},
                             timeout=self._timeout)
        except httpx.TransportError as exc:
            _log.error("flight.catalog_unreachable", path=path, error=str(exc))
            raise Unavailable("this Flight server cannot reach its catalog",
                              details={"while": "checking the caller's token"}) from None

    @staticmethod
    def _refusal(resp: httpx.Response) -> WindpipeError:
        try:
            return error_from_envelope(resp.json())
        except ValueError:
            return Unavailable(f"the catalog answered {resp.status_code}")

    def authenticate(self, token: str | None) -> Principal:
        """``GET /v1/whoami`` with the caller's token."""
        resp = self._get("/v1/whoami", token)
        if resp.status_code != 200:
            raise self._refusal(resp)
        body = resp.json()
        return Principal(str(body["name"]), Role(body["role"]), body.get("datasets"))

    def requires_tokens(self) -> bool:
        """Whether the catalog refuses an anonymous ``GET /v1/whoami`` (401); False when it
        answers one (with the open ``local`` admin); ``unavailable`` when it cannot be
        asked (the start-up check of a REST-backed server, ``windpipe.services.exposure``)."""
        resp = self._get("/v1/whoami", None)
        if resp.status_code in (200, 401):
            return resp.status_code == 401
        raise Unavailable(f"the catalog answered {resp.status_code} to GET /v1/whoami")

    def authorize_plan(self, token: str | None, principal: Principal, plan_id: str) -> None:
        """``GET /v1/plans/{id}`` with the caller's token: 200 or 404 pass, else refused."""
        if principal.datasets is None:
            return  # an unscoped principal reads every plan
        resp = self._get(f"/v1/plans/{check_plan_id(plan_id)}", token)
        if resp.status_code not in (200, 404):
            raise self._refusal(resp)


class CachedAccess:
    """Positive answers of ``inner`` kept ``ttl_s`` seconds (at most ``max_entries``)."""

    def __init__(self, inner: FlightAccess, *, ttl_s: float, max_entries: int = 4096) -> None:
        self._inner = inner
        self._ttl = ttl_s
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], tuple[float, Principal]] = OrderedDict()

    @staticmethod
    def _key(token: str | None) -> str:
        return hash_token(token) if token else "-"

    def _cached(self, key: tuple[str, str]) -> Principal | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0] < time.monotonic():
                self._entries.pop(key, None)
                return None
            return hit[1]

    def _store(self, key: tuple[str, str], principal: Principal) -> None:
        with self._lock:
            self._entries[key] = (time.monotonic() + self._ttl, principal)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def authenticate(self, token: str | None) -> Principal:
        """The inner answer, cached when positive."""
        key = (self._key(token), "")
        principal = self._cached(key)
        if principal is None:
            principal = self._inner.authenticate(token)
            if self._ttl > 0:
                self._store(key, principal)
        return principal

    def authorize_plan(self, token: str | None, principal: Principal, plan_id: str) -> None:
        """The inner decision, cached when positive."""
        key = (self._key(token), plan_id)
        if self._cached(key) is not None:
            return
        self._inner.authorize_plan(token, principal, plan_id)
        if self._ttl > 0:
            self._store(key, principal)
