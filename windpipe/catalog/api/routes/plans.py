"""Window plans of a split: create, read, the stored artifact, report and schedule."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response, status

from windpipe.catalog import plans, retire
from windpipe.catalog.api.auth import plan_dataset, require, split_dataset
from windpipe.catalog.api.deps import Context, PageSize, PageToken
from windpipe.catalog.api.routes.common import created_or_found, next_offset_token, page_offset
from windpipe.catalog.api.schemas import DEFAULT_PAGE_SIZE, PageOut, PlanOut
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import PlanRow
from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.limits import INT64_MAX
from windpipe.services.contract.principals import Role
from windpipe.services.contract.reports import PlanReportData, ScheduleBatch
from windpipe.services.contract.shapes import ID_PATTERN
from windpipe.services.planning.artifact import ARTIFACT_MEDIA_TYPE

__all__ = ["v1"]

v1 = APIRouter(tags=["plans"])
_WRITE = [Depends(require(Role.WRITER, dataset=split_dataset))]
_READ = [Depends(require(Role.READER, dataset=plan_dataset))]

PlanId = Annotated[str, Path(pattern=ID_PATTERN, description="a plan id (p-...)")]
Epoch = Annotated[int, Query(ge=0, le=INT64_MAX, description="epoch")]
Rank = Annotated[int, Query(ge=0, le=INT64_MAX, description="rank of the consumer")]
WorldSize = Annotated[int, Query(
    ge=1, le=INT64_MAX, description="number of ranks (at most WINDPIPE_MAX_WORLD_SIZE)")]


@v1.post(
    "/splits/{split_id}/plans",
    operation_id="create_plan", dependencies=_WRITE,
    status_code=status.HTTP_201_CREATED,
    response_model=PlanOut,
    responses={200: {"model": PlanOut, "description": "this plan already existed"}},
)
def create_plan(ctx: Context, split_id: str, body: PlanSpec, response: Response) -> PlanOut:
    """Validate a ``PlanSpec`` (the planning fields of a ``LoaderConfig``) against the data
    and plan it once (201; 200 when known).

    The body holds only what identifies a plan: a runtime option (``data_access``,
    ``device``, ...) or an unknown field is refused with 422.
    """
    return PlanOut.from_row(created_or_found(response, plans.create_plan(ctx, split_id, body)))


@v1.get("/plans/{plan_id}", operation_id="get_plan", dependencies=_READ, response_model=PlanOut)
def get_plan(ctx: Context, plan_id: PlanId) -> PlanOut:
    """One plan (``retired_at``: when it, its split or its version was retired)."""
    return _answer(ctx, plans.get_plan(ctx, plan_id))


@v1.delete("/plans/{plan_id}", operation_id="retire_plan", response_model=PlanOut,
           dependencies=[Depends(require(Role.ADMIN, dataset=plan_dataset))])
def retire_plan(ctx: Context, plan_id: PlanId) -> PlanOut:
    """Retire a plan (soft): Flight servers refuse its tickets from now on; streams
    already running finish."""
    return _answer(ctx, retire.retire_plan(ctx.sessions, plan_id))


@v1.get(
    "/plans/{plan_id}/artifact", operation_id="get_plan_artifact", dependencies=_READ,
    response_class=Response,
    responses={200: {"description": "the stored plan, Arrow IPC (docs/wire.md section 8)",
                     "content": {ARTIFACT_MEDIA_TYPE: {}}}},
)
def get_plan_artifact(ctx: Context, plan_id: PlanId) -> Response:
    """The stored plan as Arrow IPC: what every Flight server and in-process reader loads."""
    return Response(content=plans.plan_artifact_bytes(ctx, plan_id),
                    media_type=ARTIFACT_MEDIA_TYPE)


@v1.get("/plans/{plan_id}/report", operation_id="get_plan_report", dependencies=_READ,
        response_model=PlanReportData)
def get_plan_report(ctx: Context, plan_id: PlanId, world_size: WorldSize = 1) -> PlanReportData:
    """Batches, tokens, bytes and everything the plan drops, for ``world_size`` ranks
    (``aligned`` only for an aligned plan)."""
    return plans.plan_report_for(ctx, plan_id, world_size=world_size)


@v1.get(
    "/plans/{plan_id}/schedule", operation_id="get_plan_schedule", dependencies=_READ,
    response_model=PageOut[ScheduleBatch],
)
def get_plan_schedule(
    *, ctx: Context, plan_id: PlanId, epoch: Epoch = 0, rank: Rank = 0, world_size: WorldSize = 1,
    page_size: PageSize = DEFAULT_PAGE_SIZE, page_token: PageToken = None,
) -> PageOut[ScheduleBatch]:
    """The batches of one rank's pass of ``epoch``, in order, as lanes (paged)."""
    start = page_offset(page_token)
    items, total = plans.rank_schedule_page(
        ctx, plan_id, epoch=epoch, rank=rank, world_size=world_size, start=start,
        page_size=page_size,
    )
    return PageOut(items=items, next_page_token=next_offset_token(start + len(items), total))


def _answer(ctx: CatalogContext, row: PlanRow) -> PlanOut:
    """A stored plan as read back, ``retired_at`` its own, its split's or its version's."""
    return PlanOut.from_row(row, retired_at=retire.plan_retired_at(ctx.sessions, row.id))
