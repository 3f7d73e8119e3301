"""One error vocabulary for REST, Flight and the SDK.

Every failure windpipe reports has a ``type`` from the closed set below. The REST
API answers ``{"error": {"type", "message", "details"}}`` with the type's HTTP
status; the Flight server raises the type's Flight error with the same envelope,
JSON-encoded, in ``extra_info``; the SDK raises the exception class of the same
name. Adding a type means adding a row here and an SDK class, nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "ERROR_TABLE",
    "ErrorInfo",
    "ErrorType",
    "WindpipeError",
    "error_envelope",
    "new_error",
    "retired_error",
    "use_error_classes",
]


class ErrorType(StrEnum):
    """The closed set of error types (the ``type`` of the error envelope)."""

    INVALID_REQUEST = "invalid_request"
    INVALID_CONFIG = "invalid_config"
    INVALID_MANIFEST = "invalid_manifest"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    INVALID_TICKET = "invalid_ticket"
    SEGMENT_ERROR = "segment_error"
    SEGMENT_CHANGED = "segment_changed"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """How one error type travels: HTTP status and pyarrow.flight error class name."""

    http_status: int
    flight_error: str


ERROR_TABLE: dict[ErrorType, ErrorInfo] = {
    ErrorType.INVALID_REQUEST: ErrorInfo(422, "FlightServerError"),
    ErrorType.INVALID_CONFIG: ErrorInfo(422, "FlightServerError"),
    ErrorType.INVALID_MANIFEST: ErrorInfo(422, "FlightServerError"),
    ErrorType.NOT_FOUND: ErrorInfo(404, "FlightServerError"),
    ErrorType.CONFLICT: ErrorInfo(409, "FlightServerError"),
    ErrorType.UNAUTHENTICATED: ErrorInfo(401, "FlightUnauthenticatedError"),
    ErrorType.FORBIDDEN: ErrorInfo(403, "FlightUnauthorizedError"),
    ErrorType.INVALID_TICKET: ErrorInfo(403, "FlightUnauthorizedError"),
    ErrorType.SEGMENT_ERROR: ErrorInfo(422, "FlightInternalError"),
    ErrorType.SEGMENT_CHANGED: ErrorInfo(409, "FlightServerError"),
    ErrorType.RESOURCE_EXHAUSTED: ErrorInfo(503, "FlightServerError"),
    ErrorType.UNAVAILABLE: ErrorInfo(503, "FlightUnavailableError"),
    ErrorType.INTERNAL: ErrorInfo(500, "FlightInternalError"),
}


@dataclass(eq=False)
class WindpipeError(Exception):
    """A typed failure raised by the domain code of the catalog and Flight server.

    Routes and Flight handlers turn it into their wire form; nothing below them
    knows about HTTP or gRPC.
    """

    type: ErrorType
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    @property
    def http_status(self) -> int:
        """The HTTP status of this error's type."""
        return ERROR_TABLE[self.type].http_status

    def envelope(self) -> dict[str, Any]:
        """The REST error envelope."""
        return error_envelope(self.type, self.message, self.details)

    def to_json(self) -> bytes:
        """The envelope as compact JSON bytes (Flight ``extra_info``)."""
        return json.dumps(self.envelope(), separators=(",", ":"), default=str).encode()

    @classmethod
    def from_envelope(cls, envelope: dict[str, Any]) -> WindpipeError:
        """Rebuild from a REST or Flight envelope; unknown types become ``internal``."""
        body = envelope.get("error", {})
        try:
            kind = ErrorType(body.get("type"))
        except ValueError:
            kind = ErrorType.INTERNAL
        return cls(kind, str(body.get("message", "")), dict(body.get("details") or {}))


def error_envelope(
    type_: ErrorType, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``{"error": {"type", "message", "details"}}``."""
    return {"error": {"type": str(type_), "message": message, "details": details or {}}}


_factory: Callable[[ErrorType, str, dict[str, Any]], WindpipeError] | None = None


def use_error_classes(factory: Callable[[ErrorType, str, dict[str, Any]], WindpipeError]) -> None:
    """Make :func:`new_error` build another layer's subclasses (the SDK registers its
    exception tree on import, so a config mistake made on the client side is an
    ``sdk.InvalidConfig``, caught by ``except sdk.WindpipeError``)."""
    global _factory  # noqa: PLW0603 - one registration per process, by the SDK
    _factory = factory


def new_error(
    type_: ErrorType, message: str, details: dict[str, Any] | None = None
) -> WindpipeError:
    """A :class:`WindpipeError` of ``type_``, as the registered subclass when there is one
    (for errors raised in code users call directly, such as config constructors)."""
    if _factory is not None:
        return _factory(type_, message, dict(details or {}))
    return WindpipeError(type_, message, dict(details or {}))


def retired_error(kind: str, key: str, retired_at: datetime | str) -> WindpipeError:
    """The ``conflict`` of work asked of a retired ``kind`` (``"plan"``, ``"split"``,
    ``"version"``) named ``key``: the catalog, the Flight servers and the SDK's same-host
    reader refuse with this one message (``retired_at``: a time or its ISO 8601 text)."""
    when = retired_at.isoformat() if isinstance(retired_at, datetime) else str(retired_at)
    return WindpipeError(ErrorType.CONFLICT, f"{kind} {key!r} is retired (since {when})",
                         details={kind: key, "retired_at": when})
