"""The error envelope for every non-2xx answer: ``{"error": {"type", "message", "details"}}``.

``WindpipeError`` answers with its type's status. Request validation failures are
``invalid_request`` (422, pydantic's errors in ``details.errors``), except a config
body (``ValidationConfig``, ``LoaderConfig``) that parses as JSON but breaks the
config's own rules: that is ``invalid_config``, as when the data rejects it. Unknown
paths are ``not_found``, wrong methods ``invalid_request``, a database that cannot be
reached or a SQLite file locked past its busy timeout ``unavailable`` (503), a value
the database cannot store (NUL, an integer out of range) ``invalid_request``, and
anything unexpected is ``internal`` (500) without a traceback on the wire (it goes to
the log).
"""

from __future__ import annotations

import asyncio
import itertools
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from windpipe.catalog.api.audit import request_id_of
from windpipe.services.contract.configs import LoaderOptions
from windpipe.services.contract.errors import (
    ErrorType,
    InternalError,
    InvalidRequest,
    WindpipeError,
    error_class,
)
from windpipe.services.database import DATABASE_DOWN, database_unavailable
from windpipe.services.logging import get_logger

__all__ = ["CONFIG_BODY_OPERATIONS", "error_response", "install_error_handlers"]

CONFIG_BODY_OPERATIONS: frozenset[str] = frozenset({"create_split", "create_plan"})

_log = get_logger("catalog.api")

_STATUS_TYPES: dict[int, ErrorType] = {
    400: ErrorType.INVALID_REQUEST,
    401: ErrorType.UNAUTHENTICATED,
    404: ErrorType.NOT_FOUND,
    405: ErrorType.INVALID_REQUEST,
    409: ErrorType.CONFLICT,
    422: ErrorType.INVALID_REQUEST,
    503: ErrorType.UNAVAILABLE,
}


def error_response(error: WindpipeError, *, status: int | None = None) -> JSONResponse:
    """``error``'s envelope, with its type's HTTP status unless ``status`` says otherwise
    (a body over its bound is 422 whatever the limit's type)."""
    status = error.http_status if status is None else status
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(jsonable_encoder(error.envelope()), status_code=status, headers=headers)


async def _windpipe_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, WindpipeError)
    return error_response(exc)


_NOT_CONFIG = frozenset({"json_invalid", "model_attributes_type", "dict_type"})


def _is_config_body_error(request: Request, errors: list[dict[str, Any]]) -> bool:
    """A config body that is a JSON object but breaks the config's rules."""
    route = request.scope.get("route")
    if getattr(route, "operation_id", None) not in CONFIG_BODY_OPERATIONS:
        return False
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if loc[:1] != ("body",) or e.get("type") in _NOT_CONFIG:
            return False
        if loc == ("body",) and e.get("type") == "missing":
            return False
    return bool(errors)


def _error_text(request: Request, error: dict[str, Any]) -> str:
    """pydantic's message, or why a runtime option has no place in a plan body."""
    loc = tuple(error.get("loc", ()))
    route = request.scope.get("route")
    if (getattr(route, "operation_id", None) == "create_plan"
            and error.get("type") == "extra_forbidden" and len(loc) == 2
            and loc[0] == "body"
            and loc[1] in (*LoaderOptions.OPTION_NAMES, *LoaderOptions.model_fields)):
        return ("a runtime option of LoaderConfig, not part of a plan: the SDK keeps it "
                "client-side (send LoaderConfig.planning_dict())")
    return str(error.get("msg", "invalid request"))


_MAX_ERRORS = 100  # validation errors one 422 lists (details.errors_total: all)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    every = exc.errors()
    # the first few: a body of a million bad rows gives a million errors, and formatting
    # them all would hold the event loop for seconds (and the answer would be a GiB)
    errors = [dict(e) for e in itertools.islice(every, _MAX_ERRORS)]
    for e in errors:
        e.pop("url", None)
        if "ctx" in e:
            e["ctx"] = {k: str(v) for k, v in e["ctx"].items()}
        e.pop("input", None)
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"{where}: {_error_text(request, first)}" if where else "invalid request"
    kind = (
        ErrorType.INVALID_CONFIG if _is_config_body_error(request, errors)
        else ErrorType.INVALID_REQUEST
    )
    details: dict[str, Any] = {"errors": errors}
    if len(every) > len(errors):
        details["errors_total"] = len(every)
    return error_response(error_class(kind)(message, details=details), status=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = _STATUS_TYPES.get(
        exc.status_code,
        ErrorType.INTERNAL if exc.status_code >= 500 else ErrorType.INVALID_REQUEST,
    )
    if exc.status_code == 404:
        message = f"no such resource: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return error_response(error_class(kind)(message), status=exc.status_code)


class InternalErrorMiddleware:
    """Turns an unexpected exception into a 500 ``internal`` envelope and logs it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def _send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, _send)
        except Exception as exc:
            request_id = request_id_of(scope)
            # formatting a traceback takes a while: off the event loop, so /healthz stays fast
            await asyncio.get_running_loop().run_in_executor(None, partial(
                _log.error, "unhandled error", path=scope.get("path"),
                error=type(exc).__name__, request_id=request_id, exc_info=exc))
            if started:
                raise
            response = error_response(InternalError(
                "internal server error; the request's outcome is unknown "
                f"(request id {request_id}: the server log has the details)"))
            await response(scope, receive, send)


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    """The database cannot be reached, dropped the connection or (SQLite) stayed locked
    past the busy timeout: 503, retry later."""
    _log.warning("database unavailable", error=type(exc).__name__)
    return error_response(database_unavailable(exc))


async def _database_refused(_request: Request, exc: Exception) -> JSONResponse:
    """A value the database cannot store (a NUL byte, an integer out of its range)."""
    return error_response(InvalidRequest(
        "a value in the request cannot be stored (a NUL character or an out-of-range "
        "integer)"))


def install_error_handlers(app: FastAPI) -> None:
    """Install the envelope handlers and the 500 middleware on ``app``."""
    for down in DATABASE_DOWN:
        app.add_exception_handler(down, _database_down)
    app.add_exception_handler(sa_exc.DataError, _database_refused)
    app.add_exception_handler(WindpipeError, _windpipe_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(InternalErrorMiddleware)
