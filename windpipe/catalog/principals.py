"""Where principals come from: API tokens stored with a role and a dataset scope, and
the audit trail of mutations.

The principal, its roles and the rule that admits or refuses a call are the contract's
(:mod:`windpipe.services.contract.principals`, shared with the Flight servers); this module
holds what needs the catalog database. Three kinds of principal exist: stored tokens
(``api_tokens``; only the SHA-256 of the text is kept, the text is shown once), the
operator's bootstrap token (``WINDPIPE_ADMIN_TOKEN``, an admin named ``bootstrap``), and
``local``: the single user of an embedded catalog, admitted without a token only while
no token is configured at all and the server listens on loopback (or ``--insecure``).
Routes and the Flight server's database adapter (``windpipe.catalog.flight_adapters``) call
these functions; the SQL is in :mod:`windpipe.catalog.access_repository`.
"""

from __future__ import annotations

import hmac
import re
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from windpipe.catalog.access_repository import AccessRepository
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import ApiToken, AuditEvent, as_utc, utcnow
from windpipe.catalog.scopes import SCOPE_RULE, audit_target, scope_within
from windpipe.services.contract.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    Unauthenticated,
    WindpipeError,
)
from windpipe.services.contract.principals import BOOTSTRAP, LOCAL, Principal, Role, hash_token
from windpipe.services.database import session_scope

__all__ = [
    "MAX_TOKEN_LIFETIME_S",
    "MIN_TOKEN_LIFETIME_S",
    "TOKEN_PREFIX",
    "AuditPage",
    "audit_page",
    "authenticate",
    "create_token",
    "dataset_of",
    "list_audit",
    "list_tokens",
    "open_access",
    "record_audit",
    "revoke_token",
    "stored_tokens_exist",
]

TOKEN_PREFIX = "wpk_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MIN_TOKEN_LIFETIME_S = 60
MAX_TOKEN_LIFETIME_S = 10 * 365 * 86400
_GLOB = re.compile(r"^[A-Za-z0-9._\-*?\[\]!]{1,200}$")
_AUDIT_CHUNK = 500  # audit rows read at a time for a scoped principal
_AUDIT_SCAN = 20_000  # most audit rows one page of a scoped principal reads


def _unauthenticated(message: str) -> WindpipeError:
    return Unauthenticated(message,
                           details={"header": "authorization", "scheme": "Bearer"})


def open_access(ctx: CatalogContext, *, bootstrap: str | None, loopback: bool) -> bool:
    """Whether a call without a token is the ``local`` admin: no bootstrap token, no
    active stored token, and a loopback (or explicitly insecure) listener."""
    if bootstrap or not loopback:
        return False
    with session_scope(ctx.sessions) as session:
        return not AccessRepository(session).has_active_tokens()


def stored_tokens_exist(ctx: CatalogContext) -> bool:
    """Whether the database holds an active token (False before it is migrated)."""
    try:
        return not open_access(ctx, bootstrap=None, loopback=True)
    except SQLAlchemyError:
        return False


def authenticate(ctx: CatalogContext, token: str | None, *, bootstrap: str | None,
                 loopback: bool) -> Principal:
    """The principal of a bearer token (None: no header), else ``unauthenticated``."""
    if token is None:
        if open_access(ctx, bootstrap=bootstrap, loopback=loopback):
            return Principal(LOCAL, Role.ADMIN)
        raise _unauthenticated("this server requires a bearer token: send the header "
                               "'authorization: Bearer <token>' (sdk: Catalog(url, token=...))")
    if bootstrap and hmac.compare_digest(token.encode(), bootstrap.encode()):
        return Principal(BOOTSTRAP, Role.ADMIN)
    with session_scope(ctx.sessions) as session:
        row = AccessRepository(session).active_token_by_hash(hash_token(token))
    if row is None:
        raise _unauthenticated("the bearer token is not valid (unknown or revoked)")
    expires = as_utc(row.expires_at)
    if expires is not None and expires <= utcnow():
        raise _unauthenticated(f"token {row.name!r} expired at {expires:%Y-%m-%d %H:%M} UTC; "
                               "ask an admin for a new one")
    return Principal(row.name, Role(row.role), row.datasets)



def dataset_of(ctx: CatalogContext, kind: str, key: str) -> str | None:
    """The dataset name a ``version``, ``split`` or ``plan`` belongs to (None: unknown id)."""
    with session_scope(ctx.sessions) as session:
        repo = AccessRepository(session)
        get = {"version": repo.dataset_of_version, "split": repo.dataset_of_split,
               "plan": repo.dataset_of_plan}[kind]
        return get(key)


# -- tokens -------------------------------------------------------------------------


def _outside_scope(principal: Principal, message: str, **details: Any) -> WindpipeError:
    return Forbidden(f"{message}: {SCOPE_RULE}",
                     details={"scope": principal.datasets, "role": str(principal.role),
                                  **details})


def create_token(ctx: CatalogContext, *, name: str, role: Role | str,
                 datasets: str | None = None, created_by: str,
                 expires_in_s: int | None = None,
                 creator: Principal | None = None) -> tuple[ApiToken, str]:
    """Store a new token; returns the row and the token text (shown once, never stored).

    ``expires_in_s``: the token is refused that many seconds from now (None: never;
    between a minute and :data:`MAX_TOKEN_LIFETIME_S`). An expired token still counts
    as a stored token: a catalog that has minted tokens never falls back to open access.
    ``creator`` (the caller over REST; None: the operator's CLI) may hand out at most
    its own role, and only a scope within its own (:data:`windpipe.catalog.scopes.SCOPE_RULE`):
    otherwise ``forbidden``.
    """
    if not _NAME.match(name) or name in (BOOTSTRAP, LOCAL):
        raise InvalidRequest(f"token name {name!r}: use letters, digits, '.', '_', '-' "
                             f"(not {BOOTSTRAP!r} or {LOCAL!r})", details={"name": name})
    try:
        role = Role(role)
    except ValueError:
        raise InvalidRequest(f"unknown role {role!r}",
                             details={"roles": [str(r) for r in Role]}) from None
    if datasets is not None and not _GLOB.match(datasets):
        raise InvalidRequest(f"dataset scope {datasets!r} is not a glob of dataset names",
                             details={"datasets": datasets})
    if creator is not None and creator.role.rank < role.rank:
        raise _outside_scope(creator, f"token {creator.name!r} is a {creator.role} and may "
                             f"not create a {role} token", requested_role=str(role))
    if creator is not None and not scope_within(datasets, creator.datasets):
        raise _outside_scope(
            creator, f"token {creator.name!r} is scoped to {creator.datasets!r}; the new "
            f"token's scope {datasets!r} does not lie within it", datasets=datasets)
    if expires_in_s is not None and not (
            MIN_TOKEN_LIFETIME_S <= expires_in_s <= MAX_TOKEN_LIFETIME_S):
        raise InvalidRequest(f"expires_in_s must be between {MIN_TOKEN_LIFETIME_S} and "
                             f"{MAX_TOKEN_LIFETIME_S} seconds, got {expires_in_s}",
                             details={"expires_in_s": expires_in_s})
    text = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    row = ApiToken(id=uuid.uuid4().hex, name=name, role=str(role), datasets=datasets,
                   token_hash=hash_token(text), created_by=created_by, created_at=now,
                   expires_at=None if expires_in_s is None
                   else now + timedelta(seconds=expires_in_s))
    with session_scope(ctx.sessions) as session:
        repo = AccessRepository(session)
        if repo.token_by_name(name) is not None:
            raise Conflict(f"a token named {name!r} exists",
                           details={"name": name})
        repo.add_token(row)
    return row, text


def list_tokens(ctx: CatalogContext, *, visible_to: Principal | None = None) -> list[ApiToken]:
    """Every token, revoked ones included (never their text); for ``visible_to``, only
    those whose scope lies within its own (an unscoped principal sees all)."""
    with session_scope(ctx.sessions) as session:
        rows = AccessRepository(session).list_tokens()
    if visible_to is None:
        return rows
    return [row for row in rows if scope_within(row.datasets, visible_to.datasets)]


def revoke_token(ctx: CatalogContext, name: str, *, by: Principal | None = None) -> None:
    """Revoke the active token ``name`` (``not_found`` if there is none). ``by`` (the
    caller; None: the operator's CLI) may revoke only tokens whose scope lies within its
    own: any other name, existing or not, is the same ``forbidden``."""
    with session_scope(ctx.sessions) as session:
        repo = AccessRepository(session)
        if by is not None and by.datasets is not None:
            row = repo.token_by_name(name)
            if row is None or not scope_within(row.datasets, by.datasets):
                raise _outside_scope(by, f"token {by.name!r} is scoped to {by.datasets!r} "
                                     f"and holds no token named {name!r} within it",
                                     token=name)
        if not repo.revoke_token(name, utcnow()):
            raise NotFound(f"no active token named {name!r}",
                           details={"token": name})


# -- audit --------------------------------------------------------------------------


def record_audit(ctx: CatalogContext, *, principal: str, action: str, target: str | None,
                 status: int, request_id: str, at: datetime | None = None) -> None:
    """Append one audit event; ``outcome`` is ``ok``, ``refused`` (401/403) or ``error``."""
    outcome = "ok" if status < 400 else "refused" if status in (401, 403) else "error"
    event = AuditEvent(at=at or utcnow(), principal=principal[:200], action=action[:100],
                       target=target[:300] if target else None, status=status,
                       outcome=outcome, request_id=request_id[:40])
    with session_scope(ctx.sessions) as session:
        AccessRepository(session).add_audit(event)


def list_audit(ctx: CatalogContext, *, after_id: int, limit: int) -> list[AuditEvent]:
    """Audit events after ``after_id``, oldest first."""
    with session_scope(ctx.sessions) as session:
        return AccessRepository(session).list_audit(after_id=after_id, limit=limit)


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of the audit trail; ``next_after`` is the cursor of the next page (the
    last id this page read), None at the end."""

    items: list[AuditEvent]
    next_after: int | None


def audit_page(ctx: CatalogContext, *, after_id: int, limit: int,
               visible_to: Principal) -> AuditPage:
    """The audit events after ``after_id`` that ``visible_to`` may read, oldest first.

    An unscoped principal reads every event. A scoped one reads its own events and
    those about a dataset in its scope (the dataset named, or the one the version,
    split or plan id belongs to) or about a token within its scope; events naming
    nothing it can see (another dataset, an unknown id, a token creation by someone
    else) are left out. Such a page reads at most ``_AUDIT_SCAN`` rows, so it may hold
    fewer than ``limit`` events and still have a next page.
    """
    with session_scope(ctx.sessions) as session:
        repo = AccessRepository(session)
        if visible_to.datasets is None:
            rows = repo.list_audit(after_id=after_id, limit=limit + 1)
            return AuditPage(rows[:limit], rows[limit - 1].id if len(rows) > limit else None)
        items: list[AuditEvent] = []
        cursor, scanned = after_id, 0
        while scanned < _AUDIT_SCAN:
            chunk = repo.list_audit(after_id=cursor, limit=_AUDIT_CHUNK)
            scanned += len(chunk)
            visible = _visible_ids(repo, chunk, visible_to)
            for row in chunk:
                if row.id in visible:
                    if len(items) == limit:
                        return AuditPage(items, items[-1].id)
                    items.append(row)
                cursor = row.id
            if len(chunk) < _AUDIT_CHUNK:
                return AuditPage(items, None)
        return AuditPage(items, cursor)


def _visible_ids(repo: AccessRepository, rows: Sequence[AuditEvent],
                 principal: Principal) -> set[int]:
    """The ids of ``rows`` a scoped ``principal`` may read (see :func:`audit_page`)."""
    targets = {row.id: audit_target(row.target) for row in rows}
    wanted: dict[str, set[str]] = {}
    for target in targets.values():
        if target is not None:
            wanted.setdefault(target[0], set()).add(target[1])
    datasets = {(kind, key): name for kind in ("version", "split", "plan")
                for key, name in repo.datasets_of(kind, wanted.get(f"{kind}_id", ())).items()}
    scopes = repo.token_scopes(wanted.get("token_name", ()))
    visible: set[int] = set()
    for row in rows:
        target = targets[row.id]
        if row.principal == principal.name:
            visible.add(row.id)
        elif target is None:
            continue
        elif target[0] == "token_name":
            if target[1] in scopes and scope_within(scopes[target[1]], principal.datasets):
                visible.add(row.id)
        else:
            name = target[1] if target[0] == "name" else datasets.get(
                (target[0].removesuffix("_id"), target[1]))
            if name is not None and principal.may(Role.READER, name):
                visible.add(row.id)
    return visible
