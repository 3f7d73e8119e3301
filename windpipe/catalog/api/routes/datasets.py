"""Datasets and the registration of their versions."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from windpipe.catalog import service
from windpipe.catalog.api.auth import CurrentPrincipal, dataset_param, require
from windpipe.catalog.api.deps import Context, PageSize, PageToken
from windpipe.catalog.api.json_body import json_body_openapi, release, take_json_body, validate_json
from windpipe.catalog.api.manifest_body import ManifestBodyRoute
from windpipe.catalog.api.routes.jobs import prefer_wait
from windpipe.catalog.api.schemas import (
    DEFAULT_PAGE_SIZE,
    DatasetOut,
    JobOut,
    PageOut,
    RegisterVersionIn,
    VersionOut,
)
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.jobs import Jobs, Started, request_key
from windpipe.catalog.pattern import PatternSource
from windpipe.catalog.registration import error_seen_by
from windpipe.services.contract.errors import NotFound, WindpipeError
from windpipe.services.contract.principals import Role
from windpipe.services.contract.text import StoredObject

__all__ = ["key_payload", "v1"]

v1 = APIRouter(tags=["datasets"])
_READ_ALL = [Depends(require(Role.READER))]
_READ = [Depends(require(Role.READER, dataset=dataset_param()))]
_WRITE = [Depends(require(Role.WRITER, dataset=dataset_param()))]

DatasetName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$", description="dataset name")
]


@v1.get("/datasets", operation_id="list_datasets",
    dependencies=_READ_ALL, response_model=PageOut[DatasetOut])
def list_datasets(
    ctx: Context, principal: CurrentPrincipal, page_size: PageSize = DEFAULT_PAGE_SIZE,
    page_token: PageToken = None,
) -> PageOut[DatasetOut]:
    """Datasets by name (a token scoped to some datasets sees only those)."""
    visible = None if principal.datasets is None else functools.partial(
        principal.may, Role.READER)
    page = service.list_datasets(ctx, page_size=page_size, page_token=page_token,
                                 visible=visible)
    return PageOut(
        items=[DatasetOut.from_row(d) for d in page.items], next_page_token=page.next_page_token
    )


@v1.get("/datasets/{name}", operation_id="get_dataset",
    dependencies=_READ, response_model=DatasetOut)
def get_dataset(ctx: Context, name: DatasetName) -> DatasetOut:
    """One dataset."""
    return DatasetOut.from_row(service.get_dataset(ctx, name))


# Registrations wait on storage (the manifest, every segment): they run on the catalog's
# own bounded pool (windpipe/catalog/api/storage_pool.py), not on the threads serving other calls;
# their inline rows are counted before the body is decoded, and it is decoded and
# validated off the event loop (ManifestBodyRoute, windpipe/catalog/api/json_body.py).
_register = APIRouter(route_class=ManifestBodyRoute)
_DUMP: dict[str, Any] = {"mode": "json", "exclude_none": True, "exclude_defaults": True}
_ROW_LISTS = ("rows", "metadata_rows")
_ROWS: TypeAdapter[list[dict[str, Any]]] = TypeAdapter(list[StoredObject])
_CHUNK = 2048


def key_payload(body: RegisterVersionIn) -> dict[str, Any]:
    """``body.model_dump(mode="json", exclude_none=True, exclude_defaults=True)``, what
    the job's request key digests (defaults left out: a request that names none of them
    keeps the key it always had), with the inline rows dumped a slice at a time: one
    dump of them all would hold the GIL for as long."""
    payload = body.model_dump(**_DUMP, exclude=set(_ROW_LISTS))
    for field in _ROW_LISTS:
        rows: list[dict[str, Any]] | None = getattr(body, field)
        if rows is not None:
            payload[field] = [row for i in range(0, len(rows), _CHUNK)
                              for row in _ROWS.dump_python(rows[i:i + _CHUNK], **_DUMP)]
    return payload


def _start(jobs: Jobs, ctx: CatalogContext, name: str, principal: str,
           decoded: Any) -> Started:
    """Validate the decoded body, key it and start its job, or find the running job of
    the same request (in a worker thread: the first two take seconds for a manifest of
    many inline rows, and the job's row is written to the database)."""
    try:
        body = validate_json(RegisterVersionIn, decoded)
        key = request_key(name, key_payload(body))
    finally:
        release(decoded)
    started = jobs.start(dataset=name, key=key, principal=principal,
                         work=functools.partial(_register_version, ctx, name, body))
    if started.joined:  # the running job does the work: this body is done with
        release(body.rows)
        release(body.metadata_rows)
    return started


@_register.post(
    "/datasets/{name}/versions",
    operation_id="register_version", dependencies=_WRITE,
    status_code=status.HTTP_201_CREATED,
    response_model=VersionOut,
    responses={
        200: {"model": VersionOut, "description": "this content was already registered"},
        202: {"model": JobOut, "description": "still running: poll the job (Location)"},
    },
    openapi_extra=json_body_openapi(RegisterVersionIn),
)
async def register_version(
    *, ctx: Context, name: DatasetName, response: Response,
    principal: CurrentPrincipal, request: Request,
) -> VersionOut | JSONResponse:
    """Validate a manifest and every segment, then store the version (201; 200 if known;
    409 for content registered under another name, named only if the caller sees it).
    A registration by pattern may leave paths out (``exclude``) and skip the files it
    cannot read as segments (``on_bad_file: "skip"``: listed in ``skipped``).

    The registration runs as a job (``windpipe/catalog/jobs.py``); one still running after the
    ``Prefer: wait=N`` seconds the caller allows (``respond-async``: 0; none: 20) answers
    202 with the job and its ``Location``. The same request again, from any caller, finds
    the running job: it answers 200 for the version that job created (the request that
    started it answers 201), and its error is written for this caller (a conflict names
    no dataset the caller cannot read)."""
    visible = None if principal.datasets is None else functools.partial(
        principal.may, Role.READER)
    jobs: Jobs = request.app.state.jobs
    # the body (a RegisterVersionIn) is the route's to read, not declared: FastAPI would
    # decode and validate it on the event loop
    started = await run_in_threadpool(
        _start, jobs, ctx, name, principal.name, take_json_body(request))
    wait = prefer_wait(request.headers.get("prefer"))
    if started.future is not None:
        waiter = asyncio.wrap_future(started.future)
        try:
            answer, created = await asyncio.wait_for(asyncio.shield(waiter), timeout=wait)
        except TimeoutError:  # the job's outcome is its row's; nothing awaits it here
            waiter.add_done_callback(lambda done: done.cancelled() or done.exception())
        except WindpipeError as exc:  # the job's error, shared by every request of it
            raise error_seen_by(exc, dataset=name, visible=visible) from None
        else:
            if not created or started.joined:
                response.status_code = status.HTTP_200_OK
            return VersionOut.model_validate(answer)
    job = await run_in_threadpool(functools.partial(jobs.view, started.id, visible=visible))
    if job is None:  # pruned: it ended longer ago than WINDPIPE_JOB_RETENTION_S
        raise NotFound(f"no registration job {started.id!r}", details={"job_id": started.id})
    return JSONResponse(
        jsonable_encoder(JobOut.from_view(job).model_dump(mode="json")),
        status_code=status.HTTP_202_ACCEPTED,
        headers={"Location": f"/v1/jobs/{started.id}", "Retry-After": "1"})


def _register_version(
    ctx: CatalogContext, name: str, body: RegisterVersionIn,
    progress: Callable[[str, int, int], None],
) -> tuple[dict[str, Any], bool]:
    """The work of a registration job: it sees every dataset (``visible=None``), since
    any caller may find its job; each answer is written for its own caller."""
    pattern = None if body.pattern is None else PatternSource(
        pattern=body.pattern, set_id=body.set_id, protocol=body.protocol,
        metadata=body.metadata, metadata_rows=body.metadata_rows,
        exclude=tuple(body.exclude or ()), on_bad_file=body.on_bad_file)
    try:
        result = service.register_version(
            ctx, name, root=body.root, manifest=body.manifest, rows=body.rows,
            pattern=pattern, description=body.description, visible=None, progress=progress,
        )
    finally:
        release(body.rows)
        release(body.metadata_rows)
    answer = VersionOut.from_row(result.value, warnings=result.warnings,
                                 skipped=result.skipped)
    return answer.model_dump(mode="json", by_alias=True), result.created


v1.include_router(_register)


@v1.get(
    "/datasets/{name}/versions", operation_id="list_versions", dependencies=_READ,
    response_model=PageOut[VersionOut]
)
def list_versions(
    *, ctx: Context, name: DatasetName, page_size: PageSize = DEFAULT_PAGE_SIZE,
    page_token: PageToken = None, include_retired: bool = False,
) -> PageOut[VersionOut]:
    """Versions of a dataset, oldest first (retired ones only with ``include_retired``)."""
    page = service.list_versions(ctx, name, page_size=page_size, page_token=page_token,
                                 include_retired=include_retired)
    return PageOut(
        items=[VersionOut.from_row(v) for v in page.items], next_page_token=page.next_page_token
    )
