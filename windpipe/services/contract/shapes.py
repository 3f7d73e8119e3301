"""The shapes of what callers send, checked before anything is looked up or parsed.

* Resource ids (``p-<hex>``, ``s-<hex>``, ``v-<hex>``, and the short names tests and
  library users give their plans) are letters, digits, ``-`` and ``_``, 1 to
  :data:`MAX_ID_CHARS` characters: never a ``/``, ``.``, ``%`` or anything else that
  could change the meaning of a URL an id is put into. :data:`ID_PATTERN` is the one
  definition: the Flight command, the REST routes' ``{plan_id}`` and the Flight
  server's REST plan source all check it (:func:`check_plan_id`).
* JSON from a caller (a Flight command, an action body) is held to
  :data:`MAX_JSON_DEPTH` levels of nesting, counted on the raw bytes before it is
  parsed (:func:`loads_bounded`), so a deeply nested document costs one linear scan
  instead of the parser's recursion.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from windpipe.services.contract.errors import InvalidRequest

__all__ = [
    "ID_PATTERN",
    "MAX_ID_CHARS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "check_plan_id",
    "json_depth",
    "loads_bounded",
]

MAX_ID_CHARS = 200
ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_ID_CHARS - 1}}}$"
MAX_JSON_DEPTH = 16
MAX_JSON_BYTES = 64 << 10

_ID = re.compile(ID_PATTERN)
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


def check_plan_id(plan_id: object, *, what: str = "plan id") -> str:
    """``plan_id`` when it has the shape of an id, else ``invalid_request`` (nothing is
    looked up or put into a URL before this passes)."""
    if not isinstance(plan_id, str) or not _ID.fullmatch(plan_id):
        shown = plan_id[:80] if isinstance(plan_id, str) else type(plan_id).__name__
        raise InvalidRequest(
            f"{what} {shown!r} is not an id: 1 to {MAX_ID_CHARS} letters, digits, '-' or "
            "'_' (as the catalog answers them: p-...)",
            details={"pattern": ID_PATTERN})
    return plan_id


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text ``raw`` (strings skipped),
    in one linear scan; meaningful for well-formed JSON, an upper bound otherwise."""
    if not raw.count(b"[") + raw.count(b"{"):
        return 0
    bare = _STRINGS.sub(b"", raw)
    steps = _STEP[np.frombuffer(bare, dtype=np.uint8)].astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


def loads_bounded(raw: bytes, *, what: str, max_depth: int = MAX_JSON_DEPTH,
                  max_bytes: int = MAX_JSON_BYTES) -> Any:
    """``json.loads(raw)`` after checking its size and nesting; ``invalid_request`` for
    too large, too deep or malformed JSON (``what`` names the document)."""
    if len(raw) > max_bytes:
        raise InvalidRequest(f"{what} is {len(raw)} bytes, above the {max_bytes} a caller "
                             "may send", details={"bytes": len(raw), "max_bytes": max_bytes})
    depth = json_depth(raw)
    if depth > max_depth:
        raise InvalidRequest(f"{what} nests {depth} levels deep, above the {max_depth} allowed",
                             details={"depth": depth, "max_depth": max_depth})
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{what} is not JSON: {exc}") from None
