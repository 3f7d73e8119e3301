"""``Annotated`` dependency aliases shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from catalog.api.schemas import MAX_PAGE_SIZE
from catalog.service import CatalogContext
from contract.auth import AUTH_HEADER, bearer_matches
from contract.errors import ErrorType, WindpipeError
from services.settings import Settings

__all__ = ["AppSettings", "Context", "PageSize", "PageToken", "require_retire", "require_token"]


def _context(request: Request) -> CatalogContext:
    return request.app.state.catalog  # type: ignore[no-any-return]


def _settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


Context = Annotated[CatalogContext, Depends(_context)]
AppSettings = Annotated[Settings, Depends(_settings)]
PageSize = Annotated[
    int, Query(ge=1, le=MAX_PAGE_SIZE, description="items per page")
]
PageToken = Annotated[
    str | None, Query(description="next_page_token of the previous page")
]


def require_token(request: Request) -> None:
    """Bearer-token check when ``settings.token`` is set (401 ``unauthenticated``)."""
    token = request.app.state.settings.token
    if token is None:
        return
    if not bearer_matches(request.headers.get(AUTH_HEADER), token.get_secret_value()):
        raise WindpipeError(
            ErrorType.UNAUTHENTICATED, "missing or wrong bearer token (Authorization: Bearer ...)"
        )


def require_retire(request: Request) -> None:
    """Who may retire versions, splits and plans (``DELETE`` routes).

    Today: whoever the deployment admits (the bearer token, when one is set). This is
    the one place to require the admin role once roles exist.
    """
    require_token(request)
