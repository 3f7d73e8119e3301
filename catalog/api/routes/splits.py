"""Splits of a version into ``train`` and ``val``, and the statistics of their sides."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from pydantic import ValidationError

from catalog import retire, service, stats
from catalog.api.auth import require, split_dataset, version_dataset
from catalog.api.deps import Context, PageSize, PageToken
from catalog.api.routes._index import ARROW_STREAM, IndexFormat, index_response
from catalog.api.schemas import DEFAULT_PAGE_SIZE, SplitOut
from catalog.api.storage_pool import StoragePool
from catalog.context import CatalogContext
from catalog.principals import Role
from services.contract.configs import ValidationConfig
from services.contract.errors import InvalidRequest, NotFound
from services.contract.stats import Side, SplitStats, StatsRequest

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
    if not result.created:
        response.status_code = status.HTTP_200_OK
    return SplitOut.from_row(result.value)


@v1.get("/splits/{split_id}", operation_id="get_split", dependencies=_READ, response_model=SplitOut)
def get_split(ctx: Context, split_id: str) -> SplitOut:
    """One split with its counts."""
    row = service.get_split(ctx, split_id)
    return SplitOut.from_row(row, retired_at=retire.split_retired_at(ctx.sessions, split_id))


@v1.delete("/splits/{split_id}", operation_id="retire_split", response_model=SplitOut,
           dependencies=[Depends(require(Role.ADMIN, dataset=split_dataset))])
def retire_split(ctx: Context, split_id: str) -> SplitOut:
    """Retire a split (soft): new plans of it are refused, its plans' new tickets too."""
    row = retire.retire_split(ctx.sessions, split_id)
    return SplitOut.from_row(row, retired_at=retire.split_retired_at(ctx.sessions, split_id))


@v1.get(
    "/splits/{split_id}/index", operation_id="get_split_index", dependencies=_READ,
    responses={200: {"description": "JSON page or Arrow IPC stream",
                     "content": {ARROW_STREAM: {}}}},
)
def get_split_index(
    ctx: Context, split_id: str, format: IndexFormat = "json",
    page_size: PageSize = DEFAULT_PAGE_SIZE, page_token: PageToken = None,
) -> Response:
    """The version's index with this split's ``split`` column."""
    frame = service.split_index(ctx, split_id)
    return index_response(frame, fmt=format, page_size=page_size, page_token=page_token)


@v1.post(
    "/splits/{split_id}/stats", operation_id="compute_split_stats", dependencies=_COMPUTE,
    status_code=status.HTTP_201_CREATED, response_model=SplitStats,
    responses={200: {"model": SplitStats, "description": "computed before: the stored ones"}},
)
async def compute_split_stats(
    *, ctx: Context, split_id: str, body: StatsRequest, response: Response, request: Request,
) -> SplitStats:
    """Statistics of one side of the split (SEMANTICS 6a), per protocol and numeric column:
    computed once from that side's rows only (201) and stored; the same request again
    answers the stored ones (200). Reading runs on the catalog's storage threads."""
    pool: StoragePool = request.app.state.storage_pool
    result = await pool.run(stats.split_stats, ctx, split_id, body)
    if not result.created:
        response.status_code = status.HTTP_200_OK
    return result.value


@v1.get("/splits/{split_id}/stats", operation_id="get_split_stats", dependencies=_READ,
        response_model=SplitStats)
def get_split_stats(
    ctx: Context, split_id: str, side: Side = "train",
    columns: Annotated[list[str] | None, Query(
        description="columns (repeat the parameter); none: every numeric column")] = None,
) -> SplitStats:
    """The stored statistics of a side (404 until ``POST .../stats`` computed them)."""
    try:
        body = StatsRequest.model_validate({"side": side, "columns": columns})
    except ValidationError as exc:
        raise InvalidRequest(f"columns: {exc.errors()[0]['msg']}",
                             details={"columns": columns}) from None
    return _stored(ctx, split_id, body)


def _stored(ctx: CatalogContext, split_id: str, body: StatsRequest) -> SplitStats:
    service.get_split(ctx, split_id)  # an unknown split: its own not_found
    found = stats.stored_split_stats(ctx, split_id, body)
    if found is None:
        raise NotFound(
            f"statistics of the {body.side} side of {split_id} for these columns have not "
            "been computed (POST to this path computes them)",
            details={"split_id": split_id, "side": body.side})
    return found
