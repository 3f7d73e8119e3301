"""Retiring versions, splits and plans: soft, so nothing a running job reads disappears.

A retired row stays where it is (its id, index, artifact and report still answer),
but listings hide it, new work on it is refused with ``conflict`` (409), and the
Flight servers refuse new tickets of its plans: a stream already running finishes.
Retirement flows down: the splits of a retired version and the plans of a retired
split (or version) count as retired too. Retiring twice is a no-op that keeps the
first time. Who may retire is decided by the route's dependency
(``windpipe.catalog.api.deps.require_retire``), not here.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy.orm import Session, sessionmaker

from windpipe.catalog.models import PlanRow, SplitRow, Version, utcnow
from windpipe.catalog.repository import Repository
from windpipe.services.contract.errors import NotFound, WindpipeError, retired_error
from windpipe.services.database import session_scope

SessionFactory = sessionmaker[Session]

__all__ = [
    "check_plan_live",
    "check_split_live",
    "check_version_live",
    "plan_retired_at",
    "retire_plan",
    "retire_split",
    "retire_version",
    "split_retired_at",
]


def _missing(kind: str, key: str) -> WindpipeError:
    return NotFound(f"{kind} {key!r} does not exist", details={kind: key})


def _retire(sessions: SessionFactory, model: type[Version | SplitRow | PlanRow], kind: str,
            key: str) -> Version | SplitRow | PlanRow:
    with session_scope(sessions) as session:
        repo = Repository(session)
        row = cast("Version | SplitRow | PlanRow | None", session.get(model, key))
        if row is None:
            raise _missing(kind, key)
        repo.retire(row, utcnow())
        session.refresh(row)
        return row


def retire_version(sessions: SessionFactory, version_id: str) -> Version:
    """Retire a version (and so its splits and plans); ``not_found`` if there is none."""
    row = _retire(sessions, Version, "version", version_id)
    assert isinstance(row, Version)
    return row


def retire_split(sessions: SessionFactory, split_id: str) -> SplitRow:
    """Retire a split (and so its plans)."""
    row = _retire(sessions, SplitRow, "split", split_id)
    assert isinstance(row, SplitRow)
    return row


def retire_plan(sessions: SessionFactory, plan_id: str) -> PlanRow:
    """Retire a plan: its tickets are refused from now on."""
    row = _retire(sessions, PlanRow, "plan", plan_id)
    assert isinstance(row, PlanRow)
    return row


def plan_retired_at(sessions: SessionFactory, plan_id: str) -> datetime | None:
    """When the plan (or its split or version) was retired; None while it is live."""
    with session_scope(sessions) as session:
        return Repository(session).plan_retired_at(plan_id)


def split_retired_at(sessions: SessionFactory, split_id: str) -> datetime | None:
    """When the split (or its version) was retired; None while it is live."""
    with session_scope(sessions) as session:
        return Repository(session).split_retired_at(split_id)


def check_version_live(version: Version) -> None:
    """``conflict`` when new splits of ``version`` are asked for and it is retired."""
    if version.retired_at is not None:
        raise retired_error("version", version.id, version.retired_at)


def check_split_live(sessions: SessionFactory, split_id: str) -> None:
    """``conflict`` when the split or its version is retired (no new plans)."""
    when = split_retired_at(sessions, split_id)
    if when is not None:
        raise retired_error("split", split_id, when)


def check_plan_live(sessions: SessionFactory, plan_id: str) -> None:
    """``conflict`` when the plan, its split or its version is retired (no new tickets)."""
    when = plan_retired_at(sessions, plan_id)
    if when is not None:
        raise retired_error("plan", plan_id, when)
