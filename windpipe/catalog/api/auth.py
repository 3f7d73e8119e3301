"""Authentication and authorization of REST calls: FastAPI dependencies.

``authenticate`` (on every ``/v1`` router) turns the bearer header into a
:class:`windpipe.services.contract.principals.Principal` (401 for none or an unknown token, unless
the
catalog is the open, loopback ``local`` one and the caller is on its host: ``local`` is
never granted to a remote caller, ``--insecure`` or not) and keeps it in
``request.state``;
``require(role, dataset=...)`` is the reusable per-route check (403 for a role or a
dataset scope that does not allow the call)::

    @v1.post("/plans/{plan_id}/retire",
             dependencies=[Depends(require(Role.ADMIN, dataset=plan_dataset))])

``dataset`` resolves the dataset a call touches from its path (``dataset_param``,
``version_dataset``, ``split_dataset``, ``plan_dataset``); it is only looked up for a
scoped principal, and an unknown id resolves to nothing (the route answers 404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from windpipe.catalog import principals
from windpipe.catalog.context import CatalogContext
from windpipe.services.contract.auth import AUTH_HEADER, bearer_token
from windpipe.services.contract.principals import Principal, Role, authorize
from windpipe.services.exposure import is_local_peer
from windpipe.services.settings import Settings, is_loopback

__all__ = [
    "CurrentPrincipal",
    "DatasetOf",
    "authenticate",
    "dataset_param",
    "plan_dataset",
    "require",
    "split_dataset",
    "version_dataset",
]

DatasetOf = Callable[[Request, CatalogContext], str | None]


def authenticate(request: Request) -> Principal:
    """The caller's principal (401 ``unauthenticated`` when there is none)."""
    settings: Settings = request.app.state.settings
    bootstrap = settings.admin_token_text()
    peer = request.client.host if request.client is not None else None
    principal = principals.authenticate(  # `local` only for a caller on this host
        request.app.state.catalog, bearer_token(request.headers.get(AUTH_HEADER)),
        bootstrap=bootstrap,
        loopback=(is_loopback(settings.host) or settings.insecure) and is_local_peer(peer),
    )
    request.state.principal = principal
    return principal


CurrentPrincipal = Annotated[Principal, Depends(authenticate)]


def require(role: Role, *, dataset: DatasetOf | None = None) -> Callable[..., Principal]:
    """A dependency admitting principals with ``role`` (and scope over ``dataset``)."""

    def dependency(request: Request, principal: CurrentPrincipal) -> Principal:
        name = None
        if dataset is not None and principal.datasets is not None:
            name = dataset(request, request.app.state.catalog)
        authorize(principal, role, name)
        return principal

    dependency.__name__ = f"require_{role}"
    return dependency


def dataset_param(param: str = "name") -> DatasetOf:
    """The dataset named by path parameter ``param``."""
    def resolve(request: Request, _ctx: CatalogContext) -> str | None:
        return request.path_params.get(param)
    return resolve


def _lookup(kind: str, param: str) -> DatasetOf:
    def resolve(request: Request, ctx: CatalogContext) -> str | None:
        key = request.path_params.get(param)
        return principals.dataset_of(ctx, kind, key) if key else None
    return resolve


version_dataset = _lookup("version", "version_id")
split_dataset = _lookup("split", "split_id")
plan_dataset = _lookup("plan", "plan_id")
