"""Principals seen over REST: who am I, tokens (admin) and the audit trail (admin).

A scoped admin's token and audit routes hold to its scope (docs/security.md): it
creates tokens of at most its role within its scope, lists and revokes only those,
and reads only the audit events of what it can see.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response, status

from windpipe.catalog import principals
from windpipe.catalog.api.auth import CurrentPrincipal, require
from windpipe.catalog.api.deps import Context, PageSize, PageToken
from windpipe.catalog.api.schemas import (
    DEFAULT_PAGE_SIZE,
    AuditEventOut,
    PageOut,
    TokenCreatedOut,
    TokenIn,
    TokenOut,
)
from windpipe.catalog.repository import decode_page_token, encode_page_token
from windpipe.services.contract.principals import Role

__all__ = ["v1"]

v1 = APIRouter(tags=["access"])
_ADMIN = [Depends(require(Role.ADMIN))]

TokenName = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")]


@v1.get("/whoami", operation_id="whoami")
def whoami(principal: CurrentPrincipal) -> dict[str, Any]:
    """The caller's principal: ``{"name", "role", "datasets"}``."""
    return principal.as_dict()


@v1.post("/tokens", operation_id="create_token", status_code=status.HTTP_201_CREATED,
         response_model=TokenCreatedOut, dependencies=_ADMIN)
def create_token(ctx: Context, body: TokenIn, principal: CurrentPrincipal) -> TokenCreatedOut:
    """Create a token (admin, within the caller's scope); the answer holds its text,
    which is never shown again."""
    row, text = principals.create_token(ctx, name=body.name, role=body.role,
                                        datasets=body.datasets, created_by=principal.name,
                                        expires_in_s=body.expires_in_s, creator=principal)
    return TokenCreatedOut(**TokenOut.from_row(row).model_dump(), token=text)


@v1.get("/tokens", operation_id="list_tokens", response_model=PageOut[TokenOut],
        dependencies=_ADMIN)
def list_tokens(ctx: Context, principal: CurrentPrincipal) -> PageOut[TokenOut]:
    """Every token within the caller's scope, revoked ones included (admin)."""
    rows = principals.list_tokens(ctx, visible_to=principal)
    return PageOut(items=[TokenOut.from_row(t) for t in rows], next_page_token=None)


@v1.delete("/tokens/{token_name}", operation_id="revoke_token",
           status_code=status.HTTP_204_NO_CONTENT, dependencies=_ADMIN)
def revoke_token(ctx: Context, token_name: TokenName, principal: CurrentPrincipal) -> Response:
    """Revoke a token (admin, within the caller's scope): the catalog refuses it at once,
    Flight servers within ``auth_cache_s``."""
    principals.revoke_token(ctx, token_name, by=principal)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@v1.get("/audit", operation_id="list_audit", response_model=PageOut[AuditEventOut],
        dependencies=_ADMIN)
def list_audit(ctx: Context, principal: CurrentPrincipal,
               page_size: PageSize = DEFAULT_PAGE_SIZE,
               page_token: PageToken = None) -> PageOut[AuditEventOut]:
    """The audit trail, oldest first (admin; a scoped admin reads only what it can see,
    and its pages may run short of ``page_size``)."""
    key = decode_page_token(page_token, shape=(int,))
    page = principals.audit_page(ctx, after_id=key[0] if key else 0, limit=page_size,
                                 visible_to=principal)
    return PageOut(items=[AuditEventOut.from_row(r) for r in page.items],
                   next_page_token=None if page.next_after is None
                   else encode_page_token([page.next_after]))
