"""Signed, versioned, self-contained Flight tickets (format in ``docs/wire.md``).

``wpt1.<base64url(payload JSON)>.<base64url(HMAC-SHA256(secret, "wpt1." + payload))>``

The payload names everything a ``DoGet`` needs (plan, epoch, rank, world size, the
rank-local batch range, expiry), so any Flight server sharing the secret redeems
it without state. A ticket that fails to verify raises ``invalid_ticket``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import asdict, dataclass

from windpipe.services.contract.errors import InvalidTicket, WindpipeError
from windpipe.services.contract.wire import WIRE_VERSIONS

__all__ = ["TICKET_PREFIX", "TicketPayload", "sign_ticket", "verify_ticket"]

TICKET_PREFIX = b"wpt1."
_VERSION = 1


@dataclass(frozen=True, slots=True)
class TicketPayload:
    """What a ticket grants: batches ``[start_batch, end_batch)`` of one rank's pass
    (positions of record batches: an aligned plan's batch is one part per protocol)."""

    plan_id: str
    epoch: int
    rank: int
    world_size: int
    start_batch: int
    end_batch: int
    exp: float | None = None
    sub: str | None = None  # the principal the ticket was issued to
    wire: int = 1  # the stream's wire version (docs/wire.md; absent in older tickets: 1)
    input_valid: bool = False  # batches carry input_valid (absent unless asked for)


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def _unb64(raw: bytes) -> bytes:
    return base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))


def _invalid(message: str) -> WindpipeError:
    return InvalidTicket(message)


def sign_ticket(payload: TicketPayload, secret: bytes) -> bytes:
    """The ticket bytes of ``payload``."""
    body = {"v": _VERSION, **asdict(payload)}
    if not payload.input_valid:  # a ticket without it signs the bytes it always did
        del body["input_valid"]
    encoded = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    signed = TICKET_PREFIX + encoded
    mac = hmac.new(secret, signed, hashlib.sha256).digest()
    return signed + b"." + _b64(mac)


def verify_ticket(ticket: bytes, secret: bytes, *, now: float | None = None) -> TicketPayload:
    """Check signature, version, shape and expiry; the payload, else ``invalid_ticket``."""
    if not ticket.startswith(TICKET_PREFIX):
        raise _invalid("ticket is not a windpipe v1 ticket")
    signed, sep, mac_b64 = ticket.rpartition(b".")
    if not sep or signed == TICKET_PREFIX[:-1]:
        raise _invalid("ticket is malformed")
    try:
        mac = _unb64(mac_b64)
    except (binascii.Error, ValueError):
        raise _invalid("ticket signature is malformed") from None
    expected = hmac.new(secret, signed, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        raise _invalid("ticket signature does not verify (forged, altered or another secret)")
    try:
        body = json.loads(_unb64(signed[len(TICKET_PREFIX):]))
        if not isinstance(body, dict):
            raise _invalid("ticket payload is not a JSON object")
        version = body.pop("v", None)
        if version != _VERSION:
            raise _invalid(f"unsupported ticket version {version!r}")
        payload = TicketPayload(**body)
    except WindpipeError:
        raise
    except (ValueError, TypeError, binascii.Error) as exc:
        raise _invalid(f"ticket payload is malformed: {exc}") from None
    _check_range(payload)
    if payload.exp is not None and (time.time() if now is None else now) > payload.exp:
        raise _invalid("ticket has expired; ask GetFlightInfo for a new one")
    return payload


def _check_range(payload: TicketPayload) -> None:
    """Types and ranges of a verified payload (a signed ticket is still checked)."""
    ints = (payload.epoch, payload.rank, payload.world_size, payload.start_batch,
            payload.end_batch)
    if not isinstance(payload.plan_id, str) or any(
        isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 63 for v in ints
    ):
        raise _invalid("ticket payload has a field of the wrong type or out of range")
    if payload.world_size < 1 or payload.rank >= payload.world_size:
        raise _invalid("ticket payload names a rank outside its world size")
    if payload.start_batch > payload.end_batch:
        raise _invalid("ticket payload has start_batch > end_batch")
    if isinstance(payload.wire, bool) or payload.wire not in WIRE_VERSIONS:
        raise _invalid(f"ticket payload names wire version {payload.wire!r}")
    if not isinstance(payload.input_valid, bool):
        raise _invalid("ticket payload has a field of the wrong type or out of range")
