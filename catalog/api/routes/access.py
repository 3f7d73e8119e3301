"""Principals seen over REST: who am I, tokens (admin) and the audit trail (admin)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field

from catalog import principals
from catalog.api.auth import CurrentPrincipal, require
from catalog.api.deps import Context, PageSize, PageToken
from catalog.api.schemas import DEFAULT_PAGE_SIZE, PageOut
from catalog.models import ApiToken, AuditEvent, as_utc
from catalog.principals import Role
from catalog.repository import decode_page_token, encode_page_token

__all__ = ["AuditEventOut", "TokenCreatedOut", "TokenIn", "TokenOut", "v1"]

v1 = APIRouter(tags=["access"])
_ADMIN = [Depends(require(Role.ADMIN))]

TokenName = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")]


class TokenIn(BaseModel):
    """A token to create: its name, role, optional dataset glob and lifetime."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
    role: Role
    datasets: str | None = Field(default=None, description="glob of dataset names, e.g. lab-*")
    expires_in_s: int | None = Field(
        default=None, ge=principals.MIN_TOKEN_LIFETIME_S, le=principals.MAX_TOKEN_LIFETIME_S,
        description="seconds until the token is refused (default: it never expires)")


class TokenOut(BaseModel):
    """A stored token (never its text)."""

    name: str
    role: str
    datasets: str | None
    created_by: str
    created_at: datetime
    revoked_at: datetime | None
    expires_at: datetime | None = None

    @classmethod
    def from_row(cls, row: ApiToken) -> TokenOut:
        """From the ORM row."""
        created = as_utc(row.created_at)
        assert created is not None
        return cls(name=row.name, role=row.role, datasets=row.datasets,
                   created_by=row.created_by, created_at=created,
                   revoked_at=as_utc(row.revoked_at), expires_at=as_utc(row.expires_at))


class TokenCreatedOut(TokenOut):
    """A new token with its text: the only time the text is shown."""

    token: str


class AuditEventOut(BaseModel):
    """One audit event."""

    id: int
    at: datetime
    principal: str
    action: str
    target: str | None
    status: int
    outcome: str
    request_id: str

    @classmethod
    def from_row(cls, row: AuditEvent) -> AuditEventOut:
        """From the ORM row."""
        return cls(id=row.id, at=row.at, principal=row.principal, action=row.action,
                   target=row.target, status=row.status, outcome=row.outcome,
                   request_id=row.request_id)


@v1.get("/whoami", operation_id="whoami")
def whoami(principal: CurrentPrincipal) -> dict[str, Any]:
    """The caller's principal: ``{"name", "role", "datasets"}``."""
    return principal.as_dict()


@v1.post("/tokens", operation_id="create_token", status_code=status.HTTP_201_CREATED,
         response_model=TokenCreatedOut, dependencies=_ADMIN)
def create_token(ctx: Context, body: TokenIn, principal: CurrentPrincipal) -> TokenCreatedOut:
    """Create a token (admin); the answer holds its text, which is never shown again."""
    row, text = principals.create_token(ctx, name=body.name, role=body.role,
                                        datasets=body.datasets, created_by=principal.name,
                                        expires_in_s=body.expires_in_s)
    return TokenCreatedOut(**TokenOut.from_row(row).model_dump(), token=text)


@v1.get("/tokens", operation_id="list_tokens", response_model=PageOut[TokenOut],
        dependencies=_ADMIN)
def list_tokens(ctx: Context) -> PageOut[TokenOut]:
    """Every token, revoked ones included (admin)."""
    return PageOut(items=[TokenOut.from_row(t) for t in principals.list_tokens(ctx)],
                   next_page_token=None)


@v1.delete("/tokens/{token_name}", operation_id="revoke_token",
           status_code=status.HTTP_204_NO_CONTENT, dependencies=_ADMIN)
def revoke_token(ctx: Context, token_name: TokenName) -> Response:
    """Revoke a token (admin): the catalog refuses it at once, Flight servers within
    ``auth_cache_s``."""
    principals.revoke_token(ctx, token_name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@v1.get("/audit", operation_id="list_audit", response_model=PageOut[AuditEventOut],
        dependencies=_ADMIN)
def list_audit(ctx: Context, page_size: PageSize = DEFAULT_PAGE_SIZE,
               page_token: PageToken = None) -> PageOut[AuditEventOut]:
    """The audit trail, oldest first (admin)."""
    key = decode_page_token(page_token, shape=(int,))
    rows = principals.list_audit(ctx, after_id=key[0] if key else 0, limit=page_size + 1)
    more = len(rows) > page_size
    rows = rows[:page_size]
    return PageOut(items=[AuditEventOut.from_row(r) for r in rows],
                   next_page_token=encode_page_token([rows[-1].id]) if more else None)
