"""Registration jobs (``windpipe/catalog/jobs.py``): how long a registration's caller waits, and
``GET /v1/jobs/{id}`` for the one that outlasted it."""

from __future__ import annotations

import functools
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from windpipe.catalog.api.auth import CurrentPrincipal, require
from windpipe.catalog.api.schemas import JobOut
from windpipe.catalog.jobs import Jobs
from windpipe.services.contract.errors import NotFound
from windpipe.services.contract.principals import Role, authorize

__all__ = ["DEFAULT_WAIT_S", "MAX_WAIT_S", "prefer_wait", "v1"]

DEFAULT_WAIT_S = 20.0
"""How long a registration answers in place before it answers 202 with its job, when
the request states no preference (below the SDK's and most clients' 30 s timeout)."""
MAX_WAIT_S = 120.0

v1 = APIRouter(tags=["jobs"])

JobId = Annotated[str, Path(pattern=r"^j-[0-9a-f]{32}$", description="job id")]
_WAIT = re.compile(r"(?:^|[,;\s])wait\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def prefer_wait(header: str | None) -> float:
    """Seconds to wait for a registration before answering with its job, from the
    ``Prefer`` header (RFC 7240): ``wait=N`` (capped at :data:`MAX_WAIT_S`), else 0
    with ``respond-async``, else :data:`DEFAULT_WAIT_S`."""
    if not header:
        return DEFAULT_WAIT_S
    match = _WAIT.search(header)
    if match is not None:
        return min(float(match.group(1)), MAX_WAIT_S)
    return 0.0 if "respond-async" in header.lower() else DEFAULT_WAIT_S


@v1.get("/jobs/{job_id}", operation_id="get_job", response_model=JobOut,
        dependencies=[Depends(require(Role.READER))])
def get_job(job_id: JobId, request: Request, principal: CurrentPrincipal) -> JobOut:
    """A registration job: its progress, then its version or its error (a scoped token
    sees the jobs of its datasets only, as it sees their versions, and a conflict that
    names no dataset it cannot read); a job that ended longer ago than
    ``WINDPIPE_JOB_RETENTION_S`` is pruned (404)."""
    jobs: Jobs = request.app.state.jobs
    visible = None if principal.datasets is None else functools.partial(
        principal.may, Role.READER)
    job = jobs.view(job_id, visible=visible)
    if job is None:
        raise NotFound(f"no registration job {job_id!r}",
                       details={"job_id": job_id})
    authorize(principal, Role.READER, job.dataset)
    return JobOut.from_view(job)
