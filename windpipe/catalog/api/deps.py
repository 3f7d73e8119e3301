"""``Annotated`` dependency aliases shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from windpipe.catalog.api.schemas import MAX_PAGE_SIZE
from windpipe.catalog.context import CatalogContext
from windpipe.services.discovery import FlightDiscovery
from windpipe.services.settings import Settings

__all__ = ["AppSettings", "Context", "Discovery", "PageSize", "PageToken"]


def _context(request: Request) -> CatalogContext:
    return request.app.state.catalog  # type: ignore[no-any-return]


def _settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


def _discovery(request: Request) -> FlightDiscovery:
    """The app's Flight locations (made on first use from its settings; two requests
    racing to make it make two equal ones, and one stays)."""
    state = request.app.state
    found = getattr(state, "discovery", None)
    if not isinstance(found, FlightDiscovery):
        found = state.discovery = FlightDiscovery.from_settings(state.settings)
    return found


Context = Annotated[CatalogContext, Depends(_context)]
AppSettings = Annotated[Settings, Depends(_settings)]
Discovery = Annotated[FlightDiscovery, Depends(_discovery)]
PageSize = Annotated[
    int, Query(ge=1, le=MAX_PAGE_SIZE, description="items per page")
]
PageToken = Annotated[
    str | None, Query(description="next_page_token of the previous page")
]

