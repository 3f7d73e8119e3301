"""The catalog's tables (SQLAlchemy 2 typed ORM), shared by SQLite and PostgreSQL.

Everything the catalog stores is immutable once written: a version, its manifest
rows, segments and profile, a split with its assignments and the statistics of its
sides, a plan with its artifact. The one
exception is ``retired_at`` of versions, splits and plans (``windpipe/catalog/retire.py``):
set once when retired, it hides the row from listings and refuses new work on it. Ids of
versions, splits and plans are content digests, so writing the same thing twice
finds the existing row instead of creating a new one.

``registration_jobs`` is the other mutable table: a registration that outlasts its
request (``windpipe/catalog/jobs.py``) records its progress and outcome there; its version is
written in one transaction at its end, as any registration's.

``plan_artifacts`` holds each plan's stored form (``windpipe.services.planning.artifact``): its
streams, piece layout and, for the epoch-independent strategies, its schedule. The
epochs of a ``shuffled`` plan are a pure function of ``(plan, seed, epoch)``,
computed by whoever reads them, never stored.

A table whose idea the SDK also has a class for is mapped by a ``...Row`` class
(``SplitRow``, ``PlanRow``, ``SplitStatsRow``, ``PlanArtifactRow``): ``Split``, ``Plan``
and ``SplitStats`` are the user's names (``windpipe.Split``, ...), never a row.

The naming convention gives every constraint a stable name, which Alembic's batch
mode needs to alter SQLite tables. ``windpipe/migrations/versions`` must match this module
(``tests/catalog/test_migrations.py`` compares them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "NAMING_CONVENTION",
    "ApiToken",
    "AuditEvent",
    "Base",
    "Dataset",
    "ManifestRow",
    "PlanArtifactRow",
    "PlanRow",
    "RegistrationJob",
    "Segment",
    "SplitAssignment",
    "SplitRow",
    "SplitStatsRow",
    "Version",
    "utcnow",
]

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def as_utc(at: datetime | None) -> datetime | None:
    """``at`` as aware UTC: SQLite hands back naive datetimes of what was stored in UTC,
    PostgreSQL aware ones; answers and comparisons use one form."""
    return at if at is None or at.tzinfo is not None else at.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    """Declarative base with the naming convention and JSON for ``dict``/``list`` columns."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        dict[str, Any]: sa.JSON(),
        list[Any]: sa.JSON(),
    }


_TS = sa.DateTime(timezone=True)


class Dataset(Base):
    """A named dataset; its versions hang below it."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)


class Version(Base):
    """An immutable dataset version; ``id`` is the digest of its manifest (``v-...``)."""

    __tablename__ = "versions"

    id: Mapped[str] = mapped_column(sa.String(80), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(
        sa.Integer, sa.ForeignKey("datasets.id", ondelete="CASCADE"), index=True
    )
    seq: Mapped[int] = mapped_column(sa.BigInteger, unique=True)
    root_uri: Mapped[str] = mapped_column(sa.Text)
    description: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    n_manifest_rows: Mapped[int] = mapped_column(sa.BigInteger)
    n_segments: Mapped[int] = mapped_column(sa.BigInteger)
    n_rows: Mapped[int] = mapped_column(sa.BigInteger)
    schema: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    metadata_columns: Mapped[list[Any]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(_TS, nullable=True, default=None)
    # what registration learned about the values (windpipe.services.contract.stats.VersionProfile
    # as JSON; None for versions registered before profiles existed)
    profile: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON, nullable=True,
                                                           default=None)

    dataset: Mapped[Dataset] = relationship(lazy="joined")


class ManifestRow(Base):
    """One manifest row of a version: identity, metadata and row count."""

    __tablename__ = "manifest_rows"

    version_id: Mapped[str] = mapped_column(
        sa.String(80), sa.ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True
    )
    manifest_row_id: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    position: Mapped[int] = mapped_column(sa.BigInteger)
    set_id: Mapped[str] = mapped_column(sa.Text)
    cell_id: Mapped[str] = mapped_column(sa.Text)
    cidx: Mapped[int] = mapped_column(sa.BigInteger)
    protocol: Mapped[str] = mapped_column(sa.String(100))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", sa.JSON)
    row_count: Mapped[int] = mapped_column(sa.BigInteger)


class Segment(Base):
    """One normalized segment of a manifest row, in stream order (``ordinal``)."""

    __tablename__ = "segments"
    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["version_id", "manifest_row_id"],
            ["manifest_rows.version_id", "manifest_rows.manifest_row_id"],
            ondelete="CASCADE",
        ),
    )

    version_id: Mapped[str] = mapped_column(sa.String(80), primary_key=True)
    manifest_row_id: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    ordinal: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    path: Mapped[str] = mapped_column(sa.Text)
    format: Mapped[str] = mapped_column(sa.String(20))
    row_count: Mapped[int] = mapped_column(sa.BigInteger)
    chunk_rows: Mapped[list[Any]] = mapped_column(sa.JSON)
    fingerprint: Mapped[str] = mapped_column(sa.Text)


class SplitRow(Base):
    """A train/val split of a version; ``id`` digests the version and the config (``s-...``)."""

    __tablename__ = "splits"

    id: Mapped[str] = mapped_column(sa.String(80), primary_key=True)
    version_id: Mapped[str] = mapped_column(
        sa.String(80), sa.ForeignKey("versions.id", ondelete="CASCADE"), index=True
    )
    config: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    counts: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    # cells with rows on both sides (windpipe.services.contract.leakage.SplitLeakage as JSON),
    # counted when the split was made; null for a split stored before it was counted
    leakage: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(_TS, nullable=True, default=None)


class SplitAssignment(Base):
    """The split (``train`` / ``val``) of one manifest row."""

    __tablename__ = "split_assignments"

    split_id: Mapped[str] = mapped_column(
        sa.String(80), sa.ForeignKey("splits.id", ondelete="CASCADE"), primary_key=True
    )
    manifest_row_id: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    split: Mapped[str] = mapped_column(sa.String(20))


class SplitStatsRow(Base):
    """Statistics of one side of a split (``windpipe.services.contract.stats.SplitStatsData`` as
    JSON),
    computed once per split, side and columns (``columns_key``: ``*`` for every numeric
    column, else a digest of the sorted names; ``windpipe/catalog/stats.py``)."""

    __tablename__ = "split_stats"

    split_id: Mapped[str] = mapped_column(
        sa.String(80), sa.ForeignKey("splits.id", ondelete="CASCADE"), primary_key=True
    )
    side: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    columns_key: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    stats: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)


class PlanRow(Base):
    """A window plan of a split; ``id`` digests the split and the planning fields (``p-...``)."""

    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(sa.String(80), primary_key=True)
    split_id: Mapped[str] = mapped_column(
        sa.String(80), sa.ForeignKey("splits.id", ondelete="CASCADE"), index=True
    )
    config: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    report: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    n_streams: Mapped[int] = mapped_column(sa.BigInteger)
    n_units: Mapped[int] = mapped_column(sa.BigInteger)
    n_batches: Mapped[int] = mapped_column(sa.BigInteger)
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(_TS, nullable=True, default=None)

    split: Mapped[SplitRow] = relationship(lazy="joined")


class PlanArtifactRow(Base):
    """The stored form of a plan (``windpipe.services.planning.artifact``): Arrow IPC bytes, one row
    per plan.

    Everything a consumer needs that does not depend on the epoch: streams, piece
    layout and, for epoch-independent strategies, the schedule. Written in the
    plan's own transaction; read by the catalog and by every Flight server.
    """

    __tablename__ = "plan_artifacts"

    plan_id: Mapped[str] = mapped_column(
        sa.String(80), sa.ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True
    )
    format: Mapped[int] = mapped_column(sa.Integer)
    n_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    data: Mapped[bytes] = mapped_column(sa.LargeBinary)


class ApiToken(Base):
    """A principal: an API token stored as the SHA-256 of its text (shown once), a role,
    an optional glob of the dataset names it may touch and an optional expiry."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    role: Mapped[str] = mapped_column(sa.String(16))
    datasets: Mapped[str | None] = mapped_column(sa.String(200), nullable=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_by: Mapped[str] = mapped_column(sa.String(200))
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(_TS, nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(_TS, nullable=True)


class AuditEvent(Base):
    """One mutation attempt: who, what (operation and target), when, and the outcome."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(_TS, default=utcnow, index=True)
    principal: Mapped[str] = mapped_column(sa.String(200))
    action: Mapped[str] = mapped_column(sa.String(100))
    target: Mapped[str | None] = mapped_column(sa.String(300), nullable=True)
    status: Mapped[int] = mapped_column(sa.Integer)
    outcome: Mapped[str] = mapped_column(sa.String(16))
    request_id: Mapped[str] = mapped_column(sa.String(40))


class RegistrationJob(Base):
    """A registration run in the background (``windpipe/catalog/jobs.py``): its progress while
    ``running`` (``updated_at`` is its heartbeat), then the version it registered
    (``result``, the ``VersionOut`` answer) or the error envelope it ended with."""

    __tablename__ = "registration_jobs"

    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    dataset: Mapped[str] = mapped_column(sa.String(200), index=True)
    request_key: Mapped[str] = mapped_column(sa.String(64), index=True)
    principal: Mapped[str] = mapped_column(sa.String(200))
    state: Mapped[str] = mapped_column(sa.String(16))
    phase: Mapped[str] = mapped_column(sa.String(20))
    checked: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    profiled: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    total: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)
    created: Mapped[bool | None] = mapped_column(sa.Boolean, nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(_TS, default=utcnow)
