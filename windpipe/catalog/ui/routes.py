"""The ``/ui`` pages: read-only HTML over the catalog, rendered on the server.

Every route is a GET that (1) turns a ``?token=`` into the page cookie and redirects
(:func:`windpipe.catalog.ui.access.token_redirect`), (2) finds the caller with the REST API's
rules, (3) checks the dataset the page belongs to against the caller's scope (an unseen
dataset is a 404, as a missing one), (4) gathers the page's values through the service
layer (:mod:`windpipe.catalog.ui.pages`, :mod:`windpipe.catalog.ui.segment`) and (5) renders a
Jinja2
template with autoescaping on, so every name, description and value is text, never
markup. An error is rendered as a page with the catalog's status and error type.
:func:`mount_ui` adds the router, the static files and :class:`~catalog.ui.access.UiHeaders`
to the app.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from windpipe.catalog import plans, service
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.ui.access import (
    UI_PREFIX,
    UiHeaders,
    check_dataset,
    check_owner,
    token_redirect,
    ui_principal,
)
from windpipe.catalog.ui.pages import (
    MAX_PREVIEW_BATCHES,
    index_page,
    plan_page,
    split_page,
    version_line,
    version_page,
)
from windpipe.catalog.ui.queries import (
    DEFAULT_LIMIT,
    bounded,
    dataset_jobs,
    find_datasets,
    plans_of,
    versions_of,
)
from windpipe.catalog.ui.segment import segment_view
from windpipe.catalog.ui.servers import Samples, probe_servers
from windpipe.services.contract.errors import InvalidRequest, WindpipeError
from windpipe.services.contract.principals import Principal, Role
from windpipe.services.discovery import FlightDiscovery
from windpipe.services.settings import Settings

__all__ = ["mount_ui", "router"]

_HERE = Path(__file__).parent
router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_HERE / "templates"),
    autoescape=True,  # every template, whatever its name: names are text, never markup
    undefined=jinja2.StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop returns


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4g}"


_env.filters.update(when=_when, bytes=_bytes, number=_number)


def _render(template: str, status: int = 200, **values: Any) -> HTMLResponse:
    return HTMLResponse(_env.get_template(template).render(**values), status_code=status)


def _page(request: Request, template: str,
          build: Callable[[CatalogContext, Principal], dict[str, Any]]) -> Response:
    """Steps 1-5 of the module docstring for one page."""
    redirect = token_redirect(request)
    if redirect is not None:
        return redirect
    try:
        principal = ui_principal(request)
        values = build(request.app.state.catalog, principal)
    except WindpipeError as exc:
        return _render("error.html", status=exc.http_status, error=exc, principal=None)
    return _render(template, principal=principal, **values)


@router.get("", response_class=HTMLResponse)
def datasets_page(request: Request, q: str = "", limit: int = DEFAULT_LIMIT,
                  offset: int = 0) -> Response:
    """Datasets, searched by name (substring, any case), paged."""
    limit, offset = bounded(limit, offset)

    def build(ctx: CatalogContext, principal: Principal) -> dict[str, Any]:
        visible = None if principal.datasets is None else (
            lambda name: principal.may(Role.READER, name))
        rows, more = find_datasets(ctx, query=q, limit=limit, offset=offset, visible=visible)
        return {"rows": rows, "more": more, "q": q, "limit": limit, "offset": offset}

    return _page(request, "datasets.html", build)


@router.get("/datasets/{name:path}", response_class=HTMLResponse)
def dataset_page(request: Request, name: str, limit: int = DEFAULT_LIMIT,
                 offset: int = 0) -> Response:
    """A dataset's versions (retired ones too, marked) and its newest registration jobs."""
    limit, offset = bounded(limit, offset)

    def build(ctx: CatalogContext, principal: Principal) -> dict[str, Any]:
        check_dataset(principal, name)
        dataset = service.get_dataset(ctx, name)
        versions, more = versions_of(ctx, name, limit=limit, offset=offset)
        jobs = dataset_jobs(ctx, name, stale_after_s=request.app.state.settings.job_stale_s)
        return {"name": dataset.name, "created_at": dataset.created_at,
                "versions": [version_line(v) for v in versions], "more": more,
                "limit": limit, "offset": offset, "jobs": jobs[:20],
                "refresh": any(j.running for j in jobs[:20])}

    return _page(request, "dataset.html", build)


@router.get("/versions/{version_id}", response_class=HTMLResponse)
def version_view(request: Request, version_id: str, *, cell: str = "", protocol: str = "",
                 limit: int = DEFAULT_LIMIT, offset: int = 0) -> Response:
    """A version: summary, its ML index (paged, filtered by cell and protocol), its
    splits, plans and registration jobs."""
    limit, offset = bounded(limit, offset)

    def build(ctx: CatalogContext, principal: Principal) -> dict[str, Any]:
        check_owner(ctx, principal, "version", version_id)
        version = service.get_version(ctx, version_id)
        index = index_page(ctx, version_id, cell=cell, protocol=protocol, limit=limit,
                           offset=offset)
        stale = request.app.state.settings.job_stale_s
        return {**version_page(ctx, version, stale_after_s=stale), "index": index, "cell": cell,
                "protocol": protocol, "limit": limit, "offset": offset}

    return _page(request, "version.html", build)


@router.get("/splits/{split_id}", response_class=HTMLResponse)
def split_view(request: Request, split_id: str) -> Response:
    """A split: groups, manifest rows and rows per side, leakage, statistics, plans."""

    def build(ctx: CatalogContext, principal: Principal) -> dict[str, Any]:
        check_owner(ctx, principal, "split", split_id)
        return split_page(ctx, split_id)

    return _page(request, "split.html", build)


@router.get("/plans/{plan_id}", response_class=HTMLResponse)
def plan_view(request: Request, plan_id: str, batches: int = 8) -> Response:
    """A plan: its report and the first batches' lanes with their provenance."""
    shown = max(1, min(batches, MAX_PREVIEW_BATCHES))

    def build(ctx: CatalogContext, principal: Principal) -> dict[str, Any]:
        check_owner(ctx, principal, "plan", plan_id)
        return plan_page(ctx, plan_id, batches=shown)

    return _page(request, "plan.html", build)


@router.get("/versions/{version_id}/segments/{manifest_row_id}/{ordinal}",
            response_class=HTMLResponse)
def segment_page(request: Request, version_id: str, manifest_row_id: int, ordinal: int,
                 plan: str = "") -> Response:
    """A segment's channels over time, a plan's windows over them."""

    def build(ctx: CatalogContext, principal: Principal) -> dict[str, Any]:
        check_owner(ctx, principal, "version", version_id)
        version = service.get_version(ctx, version_id)
        if plan:
            check_owner(ctx, principal, "plan", plan)
            artifact = plans.load_artifact(ctx, plan)
            if artifact.version_id != version_id:
                raise InvalidRequest(f"plan {plan!r} is not a plan of version {version_id!r}",
                                     details={"plan": plan, "version_id": version_id})
        view = segment_view(ctx, version, manifest_row_id=manifest_row_id, ordinal=ordinal,
                            plan_id=plan or None)
        return {"view": view, "dataset": version.dataset.name,
                "plans": [p.id for p in plans_of(ctx, version_id=version_id)]}

    return _page(request, "segment.html", build)


def _discovery(request: Request) -> FlightDiscovery:
    state = request.app.state
    found = getattr(state, "discovery", None)
    if not isinstance(found, FlightDiscovery):
        found = state.discovery = FlightDiscovery.from_settings(state.settings)
    return found


def _samples(request: Request) -> Samples:
    state = request.app.state
    found = getattr(state, "ui_server_samples", None)
    if not isinstance(found, Samples):
        found = state.ui_server_samples = Samples()
    return found


@router.get("/servers", response_class=HTMLResponse)
def servers_page(request: Request) -> Response:
    """Every Flight server the catalog knows (configured and discovered): health, cache,
    tier budget, streams, throughput since the last look, or the error it gave."""

    def build(_ctx: CatalogContext, _principal: Principal) -> dict[str, Any]:
        settings: Settings = request.app.state.settings
        discovery = _discovery(request)
        static = set(discovery.static)
        located = [(loc, "configured" if loc in static else "discovered")
                   for loc in discovery.locations()]
        servers = probe_servers(located, token=settings.admin_token_text(),
                                samples=_samples(request))
        return {"servers": servers, "discovery": discovery.source is not None,
                "answering": sum(1 for s in servers if s.health is not None)}

    return _page(request, "servers.html", build)


def mount_ui(app: FastAPI) -> None:
    """The pages, their static files (``/ui/static``) and their security headers."""
    app.include_router(router)
    app.mount(f"{UI_PREFIX}/static", StaticFiles(directory=_HERE / "static"), name="ui-static")
    app.add_middleware(UiHeaders)
