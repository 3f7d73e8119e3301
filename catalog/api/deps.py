"""``Annotated`` dependency aliases shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from catalog.api.schemas import MAX_PAGE_SIZE
from catalog.service import CatalogContext
from services.settings import Settings

__all__ = ["AppSettings", "Context", "PageSize", "PageToken"]


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

