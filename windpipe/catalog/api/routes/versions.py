"""Versions: metadata, the ML index and the segment table."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from windpipe.catalog import retire, service
from windpipe.catalog.api.auth import require, version_dataset
from windpipe.catalog.api.deps import Context, PageSize, PageToken
from windpipe.catalog.api.routes._index import INDEX_RESPONSES, IndexQuery
from windpipe.catalog.api.schemas import DEFAULT_PAGE_SIZE, PageOut, SegmentOut, VersionOut
from windpipe.services.contract.principals import Role

__all__ = ["v1"]

v1 = APIRouter(tags=["versions"])
_READ = [Depends(require(Role.READER, dataset=version_dataset))]


@v1.get("/versions/{version_id}", operation_id="get_version",
    dependencies=_READ, response_model=VersionOut)
def get_version(ctx: Context, version_id: str) -> VersionOut:
    """One version."""
    return VersionOut.from_row(service.get_version(ctx, version_id))


@v1.delete("/versions/{version_id}", operation_id="retire_version", response_model=VersionOut,
           dependencies=[Depends(require(Role.ADMIN, dataset=version_dataset))])
def retire_version(ctx: Context, version_id: str) -> VersionOut:
    """Retire a version (soft): listings hide it, new splits and plans on it are refused,
    its plans' new Flight tickets too; streams already running finish. Its pack's disk
    is given back (a stream that mapped it keeps its pages; one that had not reads the
    files)."""
    row = retire.retire_version(ctx.sessions, version_id)
    if ctx.packs is not None:
        ctx.packs.remove(version_id)
    return VersionOut.from_row(row)


@v1.get(
    "/versions/{version_id}/index", operation_id="get_version_index", dependencies=_READ,
    responses=INDEX_RESPONSES
)
def get_version_index(ctx: Context, version_id: str, page: IndexQuery) -> Response:
    """The version's ML index, sorted by identity (SEMANTICS section 1)."""
    return page.answer(service.version_index(ctx, version_id))


@v1.get(
    "/versions/{version_id}/segments", operation_id="list_segments", dependencies=_READ,
    response_model=PageOut[SegmentOut],
)
def list_segments(
    ctx: Context, version_id: str, page_size: PageSize = DEFAULT_PAGE_SIZE,
    page_token: PageToken = None,
) -> PageOut[SegmentOut]:
    """The version's normalized segments by ``(manifest_row_id, ordinal)``."""
    page = service.list_segments(ctx, version_id, page_size=page_size, page_token=page_token)
    return PageOut(
        items=[SegmentOut.from_row(s) for s in page.items], next_page_token=page.next_page_token
    )
