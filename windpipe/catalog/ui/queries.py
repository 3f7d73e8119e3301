"""The reads the pages need that the REST API has no route for: a searched page of
datasets, a version's splits, a split's (or version's) plans and a dataset's
registration jobs.

Read-only SQL through the catalog's session factory; every list is bounded (a page of
at most :data:`MAX_LIMIT` rows, found by offset: a page a person pages through by hand,
not a client's keyset walk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import Dataset, PlanRow, RegistrationJob, SplitRow, Version, as_utc
from windpipe.services.database import session_scope

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "DatasetSummary",
    "JobSummary",
    "bounded",
    "dataset_jobs",
    "find_datasets",
    "plans_of",
    "splits_of",
    "versions_of",
]

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_SCAN = 256  # rows fetched at a time when a scoped caller's glob filters names
_JOBS = 200  # most registration jobs of a dataset a page looks through


def bounded(limit: int, offset: int) -> tuple[int, int]:
    """``limit`` clamped to 1 .. :data:`MAX_LIMIT` and ``offset`` to >= 0."""
    return max(1, min(int(limit), MAX_LIMIT)), max(0, int(offset))


@dataclass(frozen=True)
class DatasetSummary:
    """One line of the datasets page."""

    name: str
    created_at: datetime | None
    versions: int
    latest: datetime | None


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped.lower()}%"


def find_datasets(ctx: CatalogContext, *, query: str, limit: int, offset: int,
                  visible: Callable[[str], bool] | None) -> tuple[list[DatasetSummary], bool]:
    """Datasets whose name holds ``query`` (any case), by name: the page at ``offset``
    and whether more follow. ``visible`` (a scoped caller's test of a name) hides the
    others before the page is cut, so offsets count only what the caller sees."""
    stmt = sa.select(Dataset).order_by(Dataset.name)
    if query:
        stmt = stmt.where(sa.func.lower(Dataset.name).like(_like(query), escape="\\"))
    with session_scope(ctx.sessions) as session:
        if visible is None:
            rows = list(session.scalars(stmt.offset(offset).limit(limit + 1)))
        else:
            rows, seen = [], 0
            for d in session.scalars(stmt.execution_options(yield_per=_SCAN)):
                if not visible(d.name):
                    continue
                seen += 1
                if seen > offset:
                    rows.append(d)
                    if len(rows) > limit:
                        break
        more = len(rows) > limit
        rows = rows[:limit]
        ids = [d.id for d in rows]
        counts = {} if not ids else {
            int(i): (int(n), t) for i, n, t in session.execute(
                sa.select(Version.dataset_id, sa.func.count(), sa.func.max(Version.created_at))
                .where(Version.dataset_id.in_(ids), Version.retired_at.is_(None))
                .group_by(Version.dataset_id))}
        return [DatasetSummary(name=d.name, created_at=as_utc(d.created_at),
                               versions=counts.get(d.id, (0, None))[0],
                               latest=as_utc(counts.get(d.id, (0, None))[1]))
                for d in rows], more


def versions_of(ctx: CatalogContext, name: str, *, limit: int, offset: int,
                ) -> tuple[list[Version], bool]:
    """Every version of dataset ``name`` (retired ones too), oldest first: a page and
    whether more follow."""
    with session_scope(ctx.sessions) as session:
        rows = list(session.scalars(
            sa.select(Version).join(Dataset, Version.dataset_id == Dataset.id)
            .where(Dataset.name == name).order_by(Version.seq)
            .offset(offset).limit(limit + 1)))
        return rows[:limit], len(rows) > limit


def splits_of(ctx: CatalogContext, version_id: str, *, limit: int = MAX_LIMIT,
              ) -> list[SplitRow]:
    """The splits of a version, oldest first (at most ``limit``)."""
    with session_scope(ctx.sessions) as session:
        return list(session.scalars(
            sa.select(SplitRow).where(SplitRow.version_id == version_id)
            .order_by(SplitRow.created_at, SplitRow.id).limit(limit)))


def plans_of(ctx: CatalogContext, *, split_id: str | None = None,
             version_id: str | None = None, limit: int = MAX_LIMIT) -> list[PlanRow]:
    """The plans of a split, or of every split of a version, oldest first."""
    stmt = sa.select(PlanRow).join(SplitRow, PlanRow.split_id == SplitRow.id)
    if split_id is not None:
        stmt = stmt.where(PlanRow.split_id == split_id)
    if version_id is not None:
        stmt = stmt.where(SplitRow.version_id == version_id)
    with session_scope(ctx.sessions) as session:
        return list(session.scalars(stmt.order_by(PlanRow.created_at, PlanRow.id)
                                    .limit(limit)))


@dataclass(frozen=True)
class JobSummary:
    """A registration job as a page lists it: never its request or error details
    (those may name storage locations), only what happened. ``done``: segments done of
    ``total`` in its phase (checked, then profiled); ``share``: that as 0..1 (None
    before the total is known)."""

    id: str
    state: str
    phase: str
    checked: int
    profiled: int
    total: int | None
    principal: str
    version_id: str | None
    error_type: str | None
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def running(self) -> bool:
        """Still running (its heartbeat is fresh)."""
        return self.state == "running"

    @property
    def done(self) -> int:
        """Segments done in its phase."""
        return self.profiled if self.phase == "profiling" else self.checked

    @property
    def share(self) -> float | None:
        """``done`` of ``total`` as 0..1 (None until the total is known)."""
        if not self.total:
            return None
        return min(1.0, self.done / self.total)


def _summary(job: RegistrationJob, stale_before: datetime | None) -> JobSummary:
    result: dict[str, Any] = job.result or {}
    error: dict[str, Any] = job.error or {}
    version = result.get("id")
    kind = error.get("type")
    state = job.state
    heard = as_utc(job.updated_at)
    if (state == "running" and stale_before is not None and heard is not None
            and heard < stale_before):
        state, kind = "interrupted", "unavailable"  # its server stopped beating (jobs.py)
    return JobSummary(
        id=job.id, state=state, phase=job.phase, checked=int(job.checked or 0),
        profiled=int(job.profiled or 0),
        total=None if job.total is None else int(job.total), principal=job.principal,
        version_id=version if isinstance(version, str) else None,
        error_type=kind if isinstance(kind, str) else None,
        created_at=as_utc(job.created_at), updated_at=as_utc(job.updated_at))


def dataset_jobs(ctx: CatalogContext, name: str, *, version_id: str | None = None,
                 stale_after_s: float | None = None) -> list[JobSummary]:
    """The newest registration jobs of dataset ``name`` (at most 200 looked at), newest
    first; with ``version_id`` those that registered that version and those of the
    dataset still running (one may register it again, or a newer version). A
    ``running`` job whose heartbeat is older than ``stale_after_s`` reads as
    ``interrupted``, as ``GET /v1/jobs/{id}`` reads it."""
    stale_before = (None if stale_after_s is None
                    else datetime.now(UTC) - timedelta(seconds=stale_after_s))
    with session_scope(ctx.sessions) as session:
        jobs = [_summary(j, stale_before) for j in session.scalars(
            sa.select(RegistrationJob).where(RegistrationJob.dataset == name)
            .order_by(RegistrationJob.created_at.desc()).limit(_JOBS))]
    if version_id is None:
        return jobs
    return [j for j in jobs if j.version_id == version_id or j.running]
