"""Splits of a version into ``train`` and ``val``, and the statistics of their sides."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from pydantic import ValidationError

from windpipe.catalog import retire, service, stats
from windpipe.catalog.api.auth import require, split_dataset, version_dataset
from windpipe.catalog.api.deps import Context
from windpipe.catalog.api.json_body import JsonBodyRoute, decoded_body, json_body_openapi
from windpipe.catalog.api.routes._index import INDEX_RESPONSES, IndexQuery
from windpipe.catalog.api.routes.common import created_or_found
from windpipe.catalog.api.schemas import SplitOut
from windpipe.catalog.api.storage_pool import StoragePool
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import SplitRow
from windpipe.services.contract.configs import ValidationConfig
from windpipe.services.contract.errors import InvalidRequest, NotFound
from windpipe.services.contract.principals import Role
from windpipe.services.contract.stats import Side, SplitStatsData, StatsRequest

__all__ = ["v1"]

v1 = APIRouter(tags=["splits"])
_WRITE = [Depends(require(Role.WRITER, dataset=version_dataset))]
_READ = [Depends(require(Role.READER, dataset=split_dataset))]
_COMPUTE = [Depends(require(Role.WRITER, dataset=split_dataset))]


@v1.post(
    "/versions/{version_id}/splits",
    operation_id="create_split", dependencies=_WRITE,
    status_code=status.HTTP_201_CREATED,
    response_model=SplitOut,
    responses={200: {"model": SplitOut, "description": "this split already existed"}},
)
def create_split(
    ctx: Context, version_id: str, body: ValidationConfig, response: Response
) -> SplitOut:
    """Assign every group to ``train`` or ``val`` (201; 200 when the same split exists)."""
    result = service.create_split(ctx, version_id, body)
    return SplitOut.from_row(created_or_found(response, result))


@v1.get("/splits/{split_id}", operation_id="get_split", dependencies=_READ, response_model=SplitOut)
def get_split(ctx: Context, split_id: str) -> SplitOut:
    """One split with its counts."""
    return _answer(ctx, service.get_split(ctx, split_id))


@v1.delete("/splits/{split_id}", operation_id="retire_split", response_model=SplitOut,
           dependencies=[Depends(require(Role.ADMIN, dataset=split_dataset))])
def retire_split(ctx: Context, split_id: str) -> SplitOut:
    """Retire a split (soft): new plans of it are refused, its plans' new tickets too."""
    return _answer(ctx, retire.retire_split(ctx.sessions, split_id))


def _answer(ctx: CatalogContext, row: SplitRow) -> SplitOut:
    """A stored split as read back, ``retired_at`` its own or its version's."""
    return SplitOut.from_row(row, retired_at=retire.split_retired_at(ctx.sessions, row.id))


@v1.get(
    "/splits/{split_id}/index", operation_id="get_split_index", dependencies=_READ,
    responses=INDEX_RESPONSES,
)
def get_split_index(ctx: Context, split_id: str, page: IndexQuery) -> Response:
    """The version's index with this split's ``split`` column."""
    return page.answer(service.split_index(ctx, split_id))


class _StatsBodyRoute(JsonBodyRoute):
    """Up to WINDPIPE_MAX_BODY_BYTES of columns: decoded and validated off the event loop."""

    body_model = StatsRequest


_compute = APIRouter(route_class=_StatsBodyRoute)


@_compute.post(
    "/splits/{split_id}/stats", operation_id="compute_split_stats", dependencies=_COMPUTE,
    status_code=status.HTTP_201_CREATED, response_model=SplitStatsData,
    responses={200: {"model": SplitStatsData, "description": "computed before: the stored ones"}},
    openapi_extra=json_body_openapi(StatsRequest),
)
async def compute_split_stats(
    *, ctx: Context, split_id: str, response: Response, request: Request,
) -> SplitStatsData:
    """Statistics of one side of the split (SEMANTICS 6a), per protocol and numeric column:
    computed once from that side's rows only (201) and stored; the same request again
    answers the stored ones (200). Reading runs on the catalog's storage threads."""
    body = await decoded_body(request, StatsRequest)  # a StatsRequest, read by the route
    pool: StoragePool = request.app.state.storage_pool
    return created_or_found(response, await pool.run(stats.split_stats, ctx, split_id, body))


v1.include_router(_compute)


@v1.get("/splits/{split_id}/stats", operation_id="get_split_stats", dependencies=_READ,
        response_model=SplitStatsData)
def get_split_stats(
    ctx: Context, split_id: str, side: Side = "train",
    columns: Annotated[list[str] | None, Query(
        description="columns (repeat the parameter); none: every numeric column")] = None,
) -> SplitStatsData:
    """The stored statistics of a side (404 until ``POST .../stats`` computed them)."""
    try:
        body = StatsRequest.model_validate({"side": side, "columns": columns})
    except ValidationError as exc:
        raise InvalidRequest(f"columns: {exc.errors()[0]['msg']}",
                             details={"columns": columns}) from None
    return _stored(ctx, split_id, body)


def _stored(ctx: CatalogContext, split_id: str, body: StatsRequest) -> SplitStatsData:
    service.get_split(ctx, split_id)  # an unknown split: its own not_found
    found = stats.stored_split_stats(ctx, split_id, body)
    if found is None:
        raise NotFound(
            f"statistics of the {body.side} side of {split_id} for these columns have not "
            "been computed (POST to this path computes them)",
            details={"split_id": split_id, "side": body.side})
    return found
