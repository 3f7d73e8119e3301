"""Authentication of Flight calls: the bearer header on every call, a principal per call.

With an access layer (:mod:`windpipe.flight_server.access`; every served deployment has one)
:class:`PrincipalAuthFactory` turns ``authorization: Bearer <token>`` into a
:class:`windpipe.services.contract.principals.Principal` in ``start_call`` and refuses a call
without a
valid one with ``FlightUnauthenticatedError`` (the ``unauthenticated`` envelope in
``extra_info``). The open ``local`` principal (no tokens anywhere) is refused to a
caller on another host (:func:`caller`). ``DoAction`` is the exception: the action's
type is not known when a call starts, so the factory only records the outcome and
``do_action`` refuses every action but ``health`` (liveness probes carry no secrets)
through :func:`caller`.

Tickets stay HMAC-signed and carry the principal they were issued to: a valid bearer
token does not make a forged or foreign ticket acceptable, and a valid ticket does
not replace the token.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow.flight as fl

from windpipe.flight_server.access import FlightAccess
from windpipe.flight_server.calls import peer_is_local
from windpipe.services.contract.auth import AUTH_HEADER, bearer_token
from windpipe.services.contract.errors import ErrorType, Unauthenticated, Unavailable, WindpipeError
from windpipe.services.contract.principals import LOCAL, Principal, Role
from windpipe.services.logging import get_logger
from windpipe.services.tracing import continued

__all__ = ["AUTH_MIDDLEWARE", "CallAuth", "PrincipalAuthFactory", "caller", "caller_token"]

AUTH_MIDDLEWARE = "windpipe-auth"

_log = get_logger("windpipe.flight.auth")


def _unauthenticated(message: str) -> fl.FlightUnauthenticatedError:
    err = Unauthenticated(message,
                          details={"header": AUTH_HEADER, "scheme": "Bearer"})
    return fl.FlightUnauthenticatedError(message, extra_info=err.to_json())


class CallAuth(fl.ServerMiddleware):  # type: ignore[misc]
    """Per-call record: the principal and token, or why there is none."""

    def __init__(self, *, principal: Principal | None, token: str | None,
                 reason: str = "") -> None:
        self.principal = principal
        self.token = token
        self.reason = reason


class PrincipalAuthFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    """Authenticates the bearer token of every call through ``access``."""

    def __init__(self, access: FlightAccess) -> None:
        self.access = access

    def start_call(self, info: Any, headers: dict[str, Any]) -> CallAuth:
        """Refuse unauthenticated calls (``DoAction``: decided by the action's type)."""
        values = headers.get(AUTH_HEADER) or []
        token = bearer_token(values[0]) if values else None
        try:
            with continued(headers):  # a check asked of the catalog: in the caller's trace
                principal = self.access.authenticate(token)
        except WindpipeError as exc:
            return self._refuse(info, token, exc)
        except Exception as exc:  # e.g. the database is down: its message names its address
            request_id = uuid.uuid4().hex[:16]
            _log.error("flight.auth_failed", request_id=request_id, error=type(exc).__name__,
                       exc_info=exc)
            err = Unavailable(f"this Flight server cannot check tokens now (request id "
                              f"{request_id}: the server log has the details)",
                              details={"request_id": request_id})
            raise fl.FlightUnavailableError(err.message, extra_info=err.to_json()) from None
        return CallAuth(principal=principal, token=token)

    @staticmethod
    def _refuse(info: Any, token: str | None, exc: WindpipeError) -> CallAuth:
        """A refused token: raised at once, except for ``DoAction`` (see the module doc)."""
        if exc.type != ErrorType.UNAUTHENTICATED:
            raise fl.FlightUnavailableError(exc.message, extra_info=exc.to_json()) from None
        if info.method != fl.FlightMethod.DO_ACTION:
            raise _unauthenticated(exc.message) from None
        return CallAuth(principal=None, token=token, reason=exc.message)


def caller(context: Any) -> Principal:
    """The call's principal; ``unauthenticated`` when it has none. A server without an
    access layer (a library user's, on loopback) serves everyone as ``local``; ``local``
    (the open embedded admin, also what a catalog without tokens answers for an
    anonymous call) is granted only to a caller on this host, never to a remote one."""
    call = context.get_middleware(AUTH_MIDDLEWARE)
    principal = Principal(LOCAL, Role.ADMIN) if call is None else call.principal
    if principal is None:
        raise _unauthenticated(call.reason)
    if principal.name == LOCAL and not peer_is_local(context):
        raise _unauthenticated(
            "this Flight server serves calls without a token only to callers on its own "
            "host: send 'authorization: Bearer <token>' (sdk: Catalog(url, token=...))")
    return principal  # type: ignore[no-any-return]


def caller_token(context: Any) -> str | None:
    """The bearer token the call carried (to ask the catalog on the caller's behalf)."""
    call = context.get_middleware(AUTH_MIDDLEWARE)
    return None if call is None else call.token  # type: ignore[no-any-return]
