"""Who a caller is and what a role allows: the rules both servers apply alike.

Roles are ordered: ``reader`` lists, reads indexes and streams; ``writer`` also
registers, splits and plans; ``admin`` also manages tokens, reads the audit trail and
retires. A principal may be scoped to dataset names matching a glob (``lab-*``); a
scoped principal never reaches another dataset's versions, splits or plans.

Why here, in the contract: the catalog (over REST) and the Flight servers (over gRPC)
decide with the same rules, and ``GET /v1/whoami`` puts a principal on the wire
(:meth:`Principal.as_dict`), so neither server owns them. Where principals come from
(stored tokens, the audit trail) is the catalog's (``windpipe.catalog.principals``); the two
principals no store holds are named here: ``bootstrap`` (the operator's
``WINDPIPE_ADMIN_TOKEN``, an admin) and ``local`` (the single user of an embedded catalog,
admitted without a token only while no token is configured and the server listens on
loopback).
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from windpipe.services.contract.errors import Forbidden

__all__ = ["BOOTSTRAP", "LOCAL", "Principal", "Role", "authorize", "hash_token"]

BOOTSTRAP = "bootstrap"
LOCAL = "local"


class Role(StrEnum):
    """What a principal may do; each role includes the ones before it."""

    READER = "reader"
    WRITER = "writer"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """0 for reader, 1 for writer, 2 for admin."""
        return list(Role).index(self)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: ``datasets`` is a glob of dataset names, None for all."""

    name: str
    role: Role
    datasets: str | None = None

    def may(self, role: Role, dataset: str | None = None) -> bool:
        """Whether this principal's role and scope allow ``role`` on ``dataset``."""
        if self.role.rank < role.rank:
            return False
        return dataset is None or self.datasets is None or fnmatch.fnmatchcase(
            dataset, self.datasets)

    def as_dict(self) -> dict[str, Any]:
        """``{"name", "role", "datasets"}`` (what ``/v1/whoami`` answers)."""
        return {"name": self.name, "role": str(self.role), "datasets": self.datasets}


def hash_token(text: str) -> str:
    """The stored form of a token: SHA-256 hex (tokens are 256-bit random, no salt needed)."""
    return hashlib.sha256(text.encode()).hexdigest()


def authorize(principal: Principal, role: Role, dataset: str | None = None) -> None:
    """Raise ``forbidden`` unless ``principal`` may act as ``role`` on ``dataset``."""
    if principal.may(role, dataset):
        return
    if principal.role.rank < role.rank:
        message = f"this call needs the {role} role; token {principal.name!r} is a {principal.role}"
    else:  # the dataset is not named: the caller may have sent only an id of it
        message = (f"token {principal.name!r} is not scoped to the dataset of this call "
                   f"(its scope: {principal.datasets!r})")
    raise Forbidden(message,
                    details={"required_role": str(role), "role": str(principal.role)})
