"""Bearer-token authentication of Flight calls (``Settings.token``).

When a token is configured, every Flight call must carry the gRPC header
``authorization: Bearer <token>``, except the ``health`` action (liveness probes
carry no secrets). :class:`BearerAuthFactory` refuses other calls in
``start_call`` with ``FlightUnauthenticatedError`` carrying the ``unauthenticated``
error envelope in ``extra_info``. ``DoAction`` is the exception: the action's type
is not known when a call starts, so the factory only records whether the call is
authenticated and ``WindpipeFlightServer.do_action`` refuses unauthenticated
actions other than ``health`` (:func:`require_auth`).

Tickets stay HMAC-signed independently: a valid bearer token does not make a
forged ticket acceptable, and a valid ticket does not replace the token.
"""

from __future__ import annotations

from typing import Any

import pyarrow.flight as fl

from contract.auth import AUTH_HEADER, bearer_matches
from contract.errors import ErrorType, WindpipeError

__all__ = ["AUTH_MIDDLEWARE", "BearerAuthFactory", "CallAuth", "require_auth"]

AUTH_MIDDLEWARE = "windpipe-auth"


def _unauthenticated(message: str) -> fl.FlightUnauthenticatedError:
    err = WindpipeError(ErrorType.UNAUTHENTICATED, message,
                        details={"header": AUTH_HEADER, "scheme": "Bearer"})
    return fl.FlightUnauthenticatedError(message, extra_info=err.to_json())


class CallAuth(fl.ServerMiddleware):  # type: ignore[misc]
    """Per-call record: ``authenticated`` and, when not, why (for ``do_action``)."""

    def __init__(self, *, authenticated: bool, reason: str = "") -> None:
        self.authenticated = authenticated
        self.reason = reason


class BearerAuthFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    """Checks ``authorization: Bearer <token>`` on every call (constant-time compare)."""

    def __init__(self, token: str) -> None:
        if not token:
            msg = "BearerAuthFactory needs a non-empty token"
            raise ValueError(msg)
        self._token = token

    def _check(self, headers: dict[str, Any]) -> str:
        values = headers.get(AUTH_HEADER) or []
        if not values:
            return ("this Flight server requires a bearer token: send the header "
                    "'authorization: Bearer <token>' (sdk: Catalog(url, token=...))")
        if not bearer_matches(values[0], self._token):
            return "the bearer token sent to this Flight server is not valid"
        return ""

    def start_call(self, info: Any, headers: dict[str, Any]) -> CallAuth:
        """Refuse unauthenticated calls (``DoAction``: decided by the action's type)."""
        reason = self._check(headers)
        if reason and info.method != fl.FlightMethod.DO_ACTION:
            raise _unauthenticated(reason)
        return CallAuth(authenticated=not reason, reason=reason)


def require_auth(context: Any) -> None:
    """Raise the ``unauthenticated`` Flight error unless this call was authenticated.

    A server without a token has no auth middleware: every call passes.
    """
    call = context.get_middleware(AUTH_MIDDLEWARE)
    if call is not None and not call.authenticated:
        raise _unauthenticated(call.reason)
