"""What every Flight call shares before and after its work: which calls are served,
who the peer is, how a request is parsed and how an error leaves.

* :class:`CallFilterFactory` (middleware on every server) refuses the calls windpipe
  does not serve, ``GetSchema``, ``DoPut``, ``DoExchange``, ``ListFlights`` and
  ``Handshake``, before any handler runs, with the typed ``invalid_request`` envelope:
  pyarrow answers an exception raised in a ``GetSchema`` handler, or the base class's
  ``NotImplementedError`` of the others, with Python traceback text and no envelope,
  while an error raised here leaves like every other typed error. ``GetFlightInfo``
  answers the schema (with the plan's ids) together with the endpoints.
* :func:`internal_error` / :func:`guard`: a ``WindpipeError`` leaves as itself
  (:func:`windpipe.services.contract.wire.to_flight_error`), anything else as a bare
  ``internal`` with a request id (the traceback goes to the log only).
* :func:`command_of`, :func:`warm_args`: requests parsed with their size, nesting
  and plan id shape checked first (:mod:`windpipe.services.contract.shapes`).
* :func:`peer_host`, :func:`peer_is_local`: the caller's address (``local``, the open
  embedded principal, is never granted to a caller on another host).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow.flight as fl

from windpipe.services.contract.errors import InternalError, InvalidRequest, WindpipeError
from windpipe.services.contract.shapes import check_plan_id, loads_bounded
from windpipe.services.contract.wire import FlightCommand, to_flight_error
from windpipe.services.exposure import is_local_peer
from windpipe.services.logging import get_logger

__all__ = [
    "CALL_FILTER",
    "UNSUPPORTED_CALLS",
    "CallFilterFactory",
    "command_of",
    "guard",
    "internal_error",
    "peer_host",
    "peer_is_local",
    "peer_text",
    "warm_args",
]

CALL_FILTER = "windpipe-calls"

UNSUPPORTED_CALLS: dict[Any, str] = {
    fl.FlightMethod.GET_SCHEMA: "GetSchema",
    fl.FlightMethod.DO_PUT: "DoPut",
    fl.FlightMethod.DO_EXCHANGE: "DoExchange",
    fl.FlightMethod.LIST_FLIGHTS: "ListFlights",
    fl.FlightMethod.HANDSHAKE: "Handshake",
}

_log = get_logger("windpipe.flight")


class CallFilterFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    """Refuses the calls a windpipe Flight server does not serve (see the module doc)."""

    def start_call(self, info: Any, headers: dict[str, Any]) -> None:
        """``invalid_request`` for an unsupported call; nothing for the others."""
        name = UNSUPPORTED_CALLS.get(info.method)
        if name is not None:
            raise to_flight_error(InvalidRequest(
                f"a windpipe Flight server does not serve {name}: GetFlightInfo (a "
                "FlightCommand) answers the schema and the endpoints, DoGet the batches, "
                "DoAction the actions (docs/wire.md)",
                details={"call": name}))


def internal_error(exc: BaseException) -> fl.FlightError:
    """The Flight error of ``exc``: a ``WindpipeError`` as itself, anything else as a bare
    ``internal`` with a request id (the details and traceback go to the log only)."""
    if isinstance(exc, WindpipeError):
        return to_flight_error(exc)
    request_id = uuid.uuid4().hex[:16]
    _log.error("flight.internal_error", request_id=request_id, error=type(exc).__name__,
               exc_info=exc)
    return to_flight_error(InternalError(
        f"internal server error (request id {request_id}: the server log has the details)",
        details={"request_id": request_id}))


def guard(fn: Callable[[], Any]) -> Any:
    """``fn()``, its failures turned into Flight errors by :func:`internal_error`."""
    try:
        return fn()
    except fl.FlightError:
        raise
    except Exception as exc:
        raise internal_error(exc) from None


def command_of(descriptor: fl.FlightDescriptor) -> FlightCommand:
    """The :class:`FlightCommand` of a descriptor, else ``invalid_request``."""
    if descriptor.descriptor_type != fl.DescriptorType.CMD:
        raise InvalidRequest("windpipe descriptors are commands (FlightCommand JSON)")
    return FlightCommand.decode(descriptor.command)


def warm_args(body: bytes) -> tuple[str, bool]:
    """The plan id of a ``warm`` action body ``{"plan_id": ..., "input_valid"?: bool}`` and
    whether it warms the plan as read with ``input_valid`` (its own blocks), else
    ``invalid_request``."""
    args = loads_bounded(body or b"{}", what='the warm action\'s body {"plan_id": ...}')
    plan_id = args.get("plan_id") if isinstance(args, dict) else None
    if not isinstance(plan_id, str) or not plan_id:
        raise InvalidRequest('warm needs a JSON body {"plan_id": ...}')
    input_valid = args.get("input_valid", False)
    if not isinstance(input_valid, bool):
        raise InvalidRequest("warm: 'input_valid' must be true or false")
    return check_plan_id(plan_id), input_valid


def peer_text(context: Any) -> str:
    """The caller's address as gRPC names it (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``,
    ``unix:...``)."""
    peer = context.peer()
    return peer.decode() if isinstance(peer, bytes) else str(peer)


def peer_host(context: Any) -> str:
    """The host part of :func:`peer_text`: ``localhost`` for a unix socket, ``""`` for
    anything unknown."""
    kind, _, rest = peer_text(context).partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rpartition(":")[0].strip("[]")
    return "localhost" if kind in ("unix", "unix-abstract") else ""


def peer_is_local(context: Any) -> bool:
    """Whether the caller is on this host (a loopback address or a unix socket)."""
    return is_local_peer(peer_host(context))
