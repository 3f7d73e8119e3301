"""The SDK's exception tree: one class per :class:`services.contract.errors.ErrorType`.

Every failure the catalog (REST) or a Flight server reports reaches the user as one
of these, whatever transport carried it::

    WindpipeError                 (also a contract.errors.WindpipeError)
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
     +-- Unavailable              unavailable         a server cannot be reached
     +-- InternalError            internal            a server bug; please report it

Each carries ``type`` (the :class:`ErrorType`), ``message`` (names the problem),
``details`` (a dict, e.g. the offending manifest rows) and ``status`` (the HTTP
status, when REST carried it). Catch :class:`WindpipeError` to handle them all.
"""

from __future__ import annotations

from typing import Any, ClassVar

from services.contract.errors import ErrorType, use_error_classes
from services.contract.errors import WindpipeError as _ContractError
from services.contract.wire import error_from_flight as wire_error_from_flight

__all__ = [
    "Conflict",
    "DataWarning",
    "Forbidden",
    "InternalError",
    "InvalidConfig",
    "InvalidManifest",
    "InvalidRequest",
    "InvalidTicket",
    "NotFound",
    "RegistrationWarning",
    "ResourceExhausted",
    "SegmentChanged",
    "SegmentError",
    "Unauthenticated",
    "Unavailable",
    "WindpipeError",
    "as_sdk_error",
    "error_class",
    "error_from_envelope",
    "error_from_flight",
]


class WindpipeError(_ContractError):
    """Base of every SDK exception (see the module docstring for the tree)."""

    error_type: ClassVar[ErrorType] = ErrorType.INTERNAL

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, status: int | None = None
    ) -> None:
        super().__init__(self.error_type, message, dict(details or {}))
        self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details, self.status))


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
    """The request contradicts what is stored."""

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
    """A server limit was hit (for example a cache budget too small for one batch)."""

    error_type = ErrorType.RESOURCE_EXHAUSTED


class Unavailable(WindpipeError):  # noqa: N818 - the names of ErrorType
    """A server cannot be reached or is shutting down; retrying later may work."""

    error_type = ErrorType.UNAVAILABLE


class InternalError(WindpipeError):
    """A bug on the server side; the message says what failed."""

    error_type = ErrorType.INTERNAL


class RegistrationWarning(UserWarning):
    """Registration succeeded, but the catalog has doubts (a protocol name new to it, or
    close to a known one: ``cyling``); ``DatasetVersion.warnings`` has the details."""


class DataWarning(RegistrationWarning):
    """Registration found something in the values a model would otherwise learn from
    silently: nulls or NaN (``-2.0`` inputs in a batch), infinities, or a time column
    sampled irregularly (gaps, steps back); ``DatasetVersion.profile`` has the counts."""


_BY_TYPE: dict[ErrorType, type[WindpipeError]] = {
    cls.error_type: cls
    for cls in (
        InvalidRequest, InvalidConfig, InvalidManifest, NotFound, Conflict, Unauthenticated,
        Forbidden, InvalidTicket, SegmentError, SegmentChanged, ResourceExhausted, Unavailable,
        InternalError,
    )
}
assert set(_BY_TYPE) == set(ErrorType), "every ErrorType needs an SDK exception"


def _new_sdk_error(error_type: ErrorType, message: str, details: dict[str, Any]) -> WindpipeError:
    return _BY_TYPE[error_type](message, details=details)


# errors raised on the client side by contract code (a config's constructor) are ours
use_error_classes(_new_sdk_error)


def error_class(error_type: ErrorType | str) -> type[WindpipeError]:
    """The exception class of an error type; unknown types map to :class:`InternalError`."""
    try:
        return _BY_TYPE[ErrorType(error_type)]
    except ValueError:
        return InternalError


def as_sdk_error(exc: _ContractError) -> WindpipeError:
    """``exc`` as the SDK class of its type (a contract error raised on the client side,
    e.g. by validating a Flight command, so ``except sdk.WindpipeError`` catches it)."""
    if isinstance(exc, WindpipeError):
        return exc
    return error_class(exc.type)(exc.message, details=exc.details)


def error_from_envelope(
    envelope: Any, *, status: int | None = None, fallback: str = ""
) -> WindpipeError:
    """Build the exception of a ``{"error": {"type", "message", "details"}}`` envelope.

    Anything that is not an envelope (a proxy's HTML page, say) becomes an
    :class:`InternalError` (or :class:`Unavailable` for 502-504) quoting ``fallback``.
    """
    body = envelope.get("error") if isinstance(envelope, dict) else None
    if not isinstance(body, dict) or "type" not in body:
        cls: type[WindpipeError] = (
            Unavailable if status in (502, 503, 504) else InternalError
        )
        text = fallback.strip()[:500] or "no error envelope in the answer"
        where = f"HTTP {status}: " if status is not None else ""
        return cls(f"{where}{text}", status=status)
    details = body.get("details")
    return error_class(str(body.get("type")))(
        str(body.get("message") or body.get("type")),
        details=details if isinstance(details, dict) else {"details": details},
        status=status,
    )


def error_from_flight(exc: BaseException, *, where: str = "") -> WindpipeError:
    """Translate a ``pyarrow.flight`` error (or a socket error) into the SDK tree.

    The envelope a windpipe server put in ``extra_info`` wins; without one the Flight
    error class decides (``services.contract.wire.error_from_flight``, the one translation).
    """
    if isinstance(exc, WindpipeError):
        return exc
    return as_sdk_error(wire_error_from_flight(exc, where=where))
