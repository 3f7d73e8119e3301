"""One error vocabulary and one exception tree for REST, Flight and the SDK.

Every failure windpipe reports has a ``type`` from the closed set :class:`ErrorType` and
is raised as the class of that type, on the servers and in the client alike::

    WindpipeError                 catch this to handle them all
     +-- InvalidRequest           invalid_request     a malformed request
     +-- InvalidConfig            invalid_config      a config the data cannot honour
     +-- InvalidManifest          invalid_manifest    registration refused; details.problems
     +-- NotFound                 not_found           unknown dataset, version, split, plan
     +-- Conflict                 conflict            the request contradicts stored state
     +-- Unauthenticated          unauthenticated     missing or wrong token
     +-- Forbidden                forbidden           the token's role or scope, or a storage root
     +-- InvalidTicket            invalid_ticket      forged, altered or expired Flight ticket
     +-- SegmentError             segment_error       a segment is missing or corrupt
     +-- SegmentChanged           segment_changed     a segment differs from its registration
     +-- ResourceExhausted        resource_exhausted  e.g. the server's cache budget
     +-- InternalError            internal            a server bug; please report it
     +-- Transient                                    retrying the same call later may work
          +-- Unavailable         unavailable         a server, database or store cannot answer now

The REST API answers ``{"error": {"type", "message", "details"}}`` with the type's HTTP
status (:data:`ERROR_TABLE`); a Flight server raises the type's Flight error with the same
envelope, JSON-encoded, in ``extra_info``; :func:`error_from_envelope` and
``windpipe.services.contract.wire.error_from_flight`` rebuild the same class on the other side.
A :class:`Transient` error's envelope says ``details.retryable: true`` (for clients in
other languages; in Python the class says it). Adding a type
means one row in :data:`ERROR_TABLE` and one class here, nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "ERROR_TABLE",
    "Conflict",
    "ErrorInfo",
    "ErrorType",
    "Forbidden",
    "InternalError",
    "InvalidConfig",
    "InvalidManifest",
    "InvalidRequest",
    "InvalidTicket",
    "NotFound",
    "ResourceExhausted",
    "SegmentChanged",
    "SegmentError",
    "Transient",
    "Unauthenticated",
    "Unavailable",
    "WindpipeError",
    "error_class",
    "error_envelope",
    "error_from_envelope",
    "retired_error",
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


class WindpipeError(Exception):
    """Base of every windpipe exception (see the module docstring for the tree).

    ``message`` names the problem, ``details`` is a JSON-able dict (e.g. the offending
    manifest rows), ``status`` the HTTP status when REST carried it. Routes and Flight
    handlers turn it into their wire form; nothing below them knows HTTP or gRPC.
    """

    error_type: ClassVar[ErrorType] = ErrorType.INTERNAL
    retryable: ClassVar[bool] = False

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.status = status

    @property
    def type(self) -> ErrorType:
        """The :class:`ErrorType` of this class."""
        return self.error_type

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details, self.status))

    @property
    def http_status(self) -> int:
        """The HTTP status of this error's type."""
        return ERROR_TABLE[self.error_type].http_status

    def envelope(self) -> dict[str, Any]:
        """The REST error envelope."""
        details = {**self.details, "retryable": True} if self.retryable else self.details
        return error_envelope(self.error_type, self.message, details)

    def to_json(self) -> bytes:
        """The envelope as compact JSON bytes (Flight ``extra_info``)."""
        return json.dumps(self.envelope(), separators=(",", ":"), default=str).encode()


def _rebuild(
    cls: type[WindpipeError], message: str, details: dict[str, Any], status: int | None
) -> WindpipeError:
    return cls(message, details=details, status=status)


class InvalidRequest(WindpipeError):  # noqa: N818 - the names of ErrorType
    """The request itself is malformed (bad parameter, bad body)."""

    error_type = ErrorType.INVALID_REQUEST


class InvalidConfig(WindpipeError):  # noqa: N818 - the names of ErrorType
    """A config that the data or this machine cannot honour (unknown column, no CUDA)."""

    error_type = ErrorType.INVALID_CONFIG


class InvalidManifest(WindpipeError):  # noqa: N818 - the names of ErrorType
    """Registration refused; ``details["problems"]`` lists every problem found."""

    error_type = ErrorType.INVALID_MANIFEST


class NotFound(WindpipeError):  # noqa: N818 - the names of ErrorType
    """An unknown dataset, version, split or plan."""

    error_type = ErrorType.NOT_FOUND


class Conflict(WindpipeError):  # noqa: N818 - the names of ErrorType
    """The request contradicts what is stored (e.g. work asked of a retired plan)."""

    error_type = ErrorType.CONFLICT


class Unauthenticated(WindpipeError):  # noqa: N818 - the names of ErrorType
    """The server wants a token (``Catalog(url, token=...)``) or refused the one given."""

    error_type = ErrorType.UNAUTHENTICATED


class Forbidden(WindpipeError):  # noqa: N818 - the names of ErrorType
    """The token is valid but its role or dataset scope does not allow the call, or a
    storage root lies outside what the operator allows."""

    error_type = ErrorType.FORBIDDEN


class InvalidTicket(WindpipeError):  # noqa: N818 - the names of ErrorType
    """A Flight ticket was forged, altered, expired or signed for another deployment."""

    error_type = ErrorType.INVALID_TICKET


class SegmentError(WindpipeError):
    """A segment could not be read; the message names it."""

    error_type = ErrorType.SEGMENT_ERROR


class SegmentChanged(WindpipeError):  # noqa: N818 - the names of ErrorType
    """A segment was rewritten, truncated or removed after its version was registered:
    windpipe refuses to serve different data under the same version id
    (``details.path``, ``details.version_id``). Register the data again."""

    error_type = ErrorType.SEGMENT_CHANGED


class ResourceExhausted(WindpipeError):  # noqa: N818 - the names of ErrorType
    """A limit was hit (a cache budget too small for one batch, a request over a bound):
    the same call fails the same way until the config or the limit changes."""

    error_type = ErrorType.RESOURCE_EXHAUSTED


class InternalError(WindpipeError):
    """A bug on the server side; the message says what failed."""

    error_type = ErrorType.INTERNAL


class Transient(WindpipeError):  # noqa: N818 - a branch of the tree, not one type
    """A failure of the moment (a server restarting, a database failing over, a store not
    answering, a queue full): retrying the same call later may succeed. The SDK's own
    retries catch this branch; ``except Transient`` is the way to write one's own."""

    retryable = True


class Unavailable(Transient):
    """A server, database or object store cannot answer now, or is shutting down."""

    error_type = ErrorType.UNAVAILABLE


_BY_TYPE: dict[ErrorType, type[WindpipeError]] = {
    cls.error_type: cls
    for cls in (
        InvalidRequest, InvalidConfig, InvalidManifest, NotFound, Conflict, Unauthenticated,
        Forbidden, InvalidTicket, SegmentError, SegmentChanged, ResourceExhausted, Unavailable,
        InternalError,
    )
}
assert set(_BY_TYPE) == set(ErrorType) == set(ERROR_TABLE), "every ErrorType needs a class"


def error_class(error_type: ErrorType | str) -> type[WindpipeError]:
    """The exception class of an error type; unknown types map to :class:`InternalError`."""
    try:
        return _BY_TYPE[ErrorType(error_type)]
    except ValueError:
        return InternalError


def error_envelope(
    type_: ErrorType, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``{"error": {"type", "message", "details"}}``."""
    return {"error": {"type": str(type_), "message": message, "details": details or {}}}


def error_from_envelope(
    envelope: Any, *, status: int | None = None, fallback: str = ""
) -> WindpipeError:
    """The exception of a ``{"error": {"type", "message", "details"}}`` envelope.

    Anything that is not an envelope (a proxy's HTML page, say) becomes an
    :class:`InternalError` (or :class:`Unavailable` for 502-504) quoting ``fallback``;
    an unknown type becomes an :class:`InternalError`.
    """
    body = envelope.get("error") if isinstance(envelope, dict) else None
    if not isinstance(body, dict) or "type" not in body:
        cls: type[WindpipeError] = Unavailable if status in (502, 503, 504) else InternalError
        text = fallback.strip()[:500] or "no error envelope in the answer"
        where = f"HTTP {status}: " if status is not None else ""
        return cls(f"{where}{text}", status=status)
    details = body.get("details")
    details = dict(details) if isinstance(details, dict) else {"details": details}
    details.pop("retryable", None)  # the class says it (Transient), not a key
    return error_class(str(body.get("type")))(
        str(body.get("message") or body.get("type")), details=details, status=status
    )


def retired_error(kind: str, key: str, retired_at: datetime | str) -> Conflict:
    """The ``conflict`` of work asked of a retired ``kind`` (``"plan"``, ``"split"``,
    ``"version"``) named ``key``: the catalog, the Flight servers and the SDK's same-host
    reader refuse with this one message (``retired_at``: a time or its ISO 8601 text)."""
    when = retired_at.isoformat() if isinstance(retired_at, datetime) else str(retired_at)
    return Conflict(f"{kind} {key!r} is retired (since {when})",
                    details={kind: key, "retired_at": when})
