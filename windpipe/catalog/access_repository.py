"""The SQL of principals and the audit trail (``api_tokens``, ``audit_events``), and the
look-ups an access decision needs (the dataset a version, split or plan belongs to).

Like :mod:`windpipe.catalog.repository` it neither commits nor decides:
:mod:`windpipe.catalog.principals`
owns the transactions and the rules.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from windpipe.catalog.models import ApiToken, AuditEvent, Dataset, PlanRow, SplitRow, Version

__all__ = ["AccessRepository"]


class AccessRepository:
    """Tokens, audit events and dataset look-ups over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # -- tokens ---------------------------------------------------------------------

    def add_token(self, token: ApiToken) -> None:
        """Insert a token row (the caller checked the name is free)."""
        self.session.add(token)
        self.session.flush()

    def token_by_name(self, name: str) -> ApiToken | None:
        """The token named ``name``, revoked or not."""
        return self.session.scalar(sa.select(ApiToken).where(ApiToken.name == name))

    def active_token_by_hash(self, token_hash: str) -> ApiToken | None:
        """The unrevoked token whose text hashes to ``token_hash``."""
        return self.session.scalar(sa.select(ApiToken).where(
            ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_(None)))

    def list_tokens(self) -> list[ApiToken]:
        """Every token by name (hashes stay in the database)."""
        return list(self.session.scalars(sa.select(ApiToken).order_by(ApiToken.name)))

    def revoke_token(self, name: str, at: datetime) -> bool:
        """Mark ``name`` revoked; False if there is no active token of that name."""
        result = self.session.execute(
            sa.update(ApiToken).where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
            .values(revoked_at=at))
        return bool(getattr(result, "rowcount", 0))

    def token_scopes(self, names: Collection[str]) -> dict[str, str | None]:
        """The dataset scope of each token of ``names`` that exists (revoked or not)."""
        if not names:
            return {}
        rows = self.session.execute(sa.select(ApiToken.name, ApiToken.datasets)
                                    .where(ApiToken.name.in_(list(names))))
        return {str(name): datasets for name, datasets in rows}

    def has_active_tokens(self) -> bool:
        """Whether any unrevoked token exists."""
        return self.session.scalar(
            sa.select(ApiToken.id).where(ApiToken.revoked_at.is_(None)).limit(1)) is not None

    # -- audit ----------------------------------------------------------------------

    def add_audit(self, event: AuditEvent) -> None:
        """Append one audit event."""
        self.session.add(event)
        self.session.flush()

    def list_audit(self, *, after_id: int, limit: int) -> list[AuditEvent]:
        """Audit events with ``id > after_id``, oldest first."""
        return list(self.session.scalars(
            sa.select(AuditEvent).where(AuditEvent.id > after_id)
            .order_by(AuditEvent.id).limit(limit)))

    # -- what a resource belongs to -------------------------------------------------

    def dataset_of_version(self, version_id: str) -> str | None:
        """The dataset name of a version, or None if there is no such version."""
        return self.session.scalar(
            sa.select(Dataset.name).join(Version, Version.dataset_id == Dataset.id)
            .where(Version.id == version_id))

    def dataset_of_split(self, split_id: str) -> str | None:
        """The dataset name of a split, or None."""
        return self.session.scalar(
            sa.select(Dataset.name).join(Version, Version.dataset_id == Dataset.id)
            .join(SplitRow, SplitRow.version_id == Version.id).where(SplitRow.id == split_id))

    def dataset_of_plan(self, plan_id: str) -> str | None:
        """The dataset name of a plan, or None."""
        return self.session.scalar(
            sa.select(Dataset.name).join(Version, Version.dataset_id == Dataset.id)
            .join(SplitRow, SplitRow.version_id == Version.id)
            .join(PlanRow, PlanRow.split_id == SplitRow.id).where(PlanRow.id == plan_id))

    def datasets_of(self, kind: str, keys: Collection[str]) -> dict[str, str]:
        """The dataset name of each ``version``, ``split`` or ``plan`` id of ``keys`` that
        exists (one query)."""
        if not keys:
            return {}
        key = {"version": Version.id, "split": SplitRow.id, "plan": PlanRow.id}[kind]
        query = (sa.select(key, Dataset.name).select_from(Dataset)
                 .join(Version, Version.dataset_id == Dataset.id))
        if kind != "version":
            query = query.join(SplitRow, SplitRow.version_id == Version.id)
        if kind == "plan":
            query = query.join(PlanRow, PlanRow.split_id == SplitRow.id)
        rows = self.session.execute(query.where(key.in_(list(keys))))
        return {str(k): str(name) for k, name in rows}
