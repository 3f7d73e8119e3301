"""Registration warnings about protocol names: a typo registers silently otherwise.

A protocol is any lower-case name (SEMANTICS section 1), so ``cyling`` is valid and
would become a protocol of its own that no plan asks for. Registration still
succeeds (the content is what it is); the answer carries a ``warnings`` list:

* ``near_miss_protocol``: a protocol of this version that the catalog has not seen
  and whose name is close (difflib ratio >= 0.8) to a built-in protocol, a protocol
  of another version, or a protocol of this version with more manifest rows;
* ``new_protocol``: a protocol seen neither among the built-ins nor in any other
  version, while the catalog holds other versions (in an empty catalog every
  protocol is new, and saying so would be noise).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from windpipe.services.contract.configs import DatasetProtocolId

__all__ = ["NEAR_MISS_CUTOFF", "protocol_warnings"]

NEAR_MISS_CUTOFF = 0.8


def protocol_warnings(
    rows_by_protocol: Mapping[str, int], *, elsewhere: Collection[str], other_versions: int,
) -> list[dict[str, Any]]:
    """The warnings of a version whose manifest rows per protocol are
    ``rows_by_protocol``; ``elsewhere``: protocols of the catalog's other versions."""
    builtin = {p.value for p in DatasetProtocolId}
    known = builtin | set(elsewhere)
    out: list[dict[str, Any]] = []
    for protocol in sorted(rows_by_protocol):
        if protocol in known:
            continue
        rows = rows_by_protocol[protocol]
        peers = {p for p, n in rows_by_protocol.items() if p != protocol and n > rows}
        close = difflib.get_close_matches(protocol, sorted(known | peers), n=1,
                                          cutoff=NEAR_MISS_CUTOFF)
        if close:
            out.append({
                "type": "near_miss_protocol", "protocol": protocol, "similar": close[0],
                "manifest_rows": rows,
                "message": f"protocol {protocol!r} ({rows} manifest rows) is new to this "
                           f"catalog and close to {close[0]!r}: a typo? Plans select "
                           "protocols by exact name",
            })
        elif other_versions:
            out.append({
                "type": "new_protocol", "protocol": protocol, "manifest_rows": rows,
                "message": f"protocol {protocol!r} ({rows} manifest rows) appears in no "
                           "other version of this catalog and is not built in "
                           f"({', '.join(sorted(builtin))})",
            })
    return out
