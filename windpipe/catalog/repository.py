"""Every SQL statement of the catalog, over one SQLAlchemy session.

The repository neither commits nor decides anything: the caller (``windpipe.catalog.service``)
owns the transaction, so a registration, a split or a plan is written all at once or
not at all. Bulk tables (manifest rows, segments, split assignments) are written
from polars frames: PostgreSQL through ``COPY ... FROM STDIN``
(psycopg's ``cursor.copy``) on the session's own connection, SQLite through driver
``executemany`` in large chunks. Lists use keyset pagination: the page token is an
opaque base64 encoding of the last key of the previous page (:mod:`windpipe.catalog.paging`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, cast

import polars as pl
import sqlalchemy as sa
from sqlalchemy.orm import Session

from windpipe.catalog.models import (
    Base,
    Dataset,
    ManifestRow,
    PlanArtifactRow,
    PlanRow,
    Segment,
    SplitAssignment,
    SplitRow,
    SplitStatsRow,
    Version,
)
from windpipe.catalog.paging import Page, decode_page_token, encode_page_token, page_of

__all__ = [
    "Page",
    "Repository",
    "decode_page_token",
    "encode_page_token",
]

_SQLITE_CHUNK = 4096  # rows made Python tuples at once: a collection's 100k would be ~40 MB
_COPY_CHUNK = 16384  # rows written as CSV at once (PostgreSQL)


class Repository:
    """The catalog's reads and writes within the caller's session (and transaction)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # -- datasets ---------------------------------------------------------------------

    def get_dataset(self, name: str) -> Dataset | None:
        """The dataset called ``name``."""
        return self.session.scalars(sa.select(Dataset).where(Dataset.name == name)).first()

    def add_dataset(self, name: str) -> Dataset:
        """Insert a dataset (flushed, so its id is known)."""
        dataset = Dataset(name=name)
        self.session.add(dataset)
        self.session.flush()
        return dataset

    def list_datasets(self, *, page_size: int, page_token: str | None,
                      visible: Callable[[str], bool] | None = None) -> Page[Dataset]:
        """Datasets by name; with ``visible``, only those it admits (a scoped caller's
        glob, which SQL LIKE cannot express portably: rows are filtered as read)."""
        stmt = sa.select(Dataset).order_by(Dataset.name)
        after = decode_page_token(page_token, shape=(str,))
        if after:
            stmt = stmt.where(Dataset.name > after[0])
        if visible is None:
            rows = list(self.session.scalars(stmt.limit(page_size + 1)))
        else:
            rows = []
            for d in self.session.scalars(stmt.execution_options(yield_per=256)):
                if visible(d.name):
                    rows.append(d)
                    if len(rows) > page_size:
                        break
        return page_of(rows, page_size, lambda d: [d.name])

    # -- versions ---------------------------------------------------------------------

    def get_version(self, version_id: str) -> Version | None:
        """The version ``version_id``."""
        return self.session.get(Version, version_id)

    def next_version_seq(self) -> int:
        """The next free ``versions.seq`` (the caller retries on a unique-key race)."""
        top = self.session.scalar(sa.select(sa.func.max(Version.seq)))
        return int(top or 0) + 1

    def add_version(self, version: Version) -> None:
        """Insert a version row (flushed)."""
        self.session.add(version)
        self.session.flush()

    def list_versions(
        self, dataset_id: int, *, page_size: int, page_token: str | None,
        include_retired: bool = False,
    ) -> Page[Version]:
        """Versions of a dataset, oldest first (retired ones only with ``include_retired``)."""
        stmt = sa.select(Version).where(Version.dataset_id == dataset_id).order_by(Version.seq)
        if not include_retired:
            stmt = stmt.where(Version.retired_at.is_(None))
        after = decode_page_token(page_token, shape=(int,))
        if after:
            stmt = stmt.where(Version.seq > after[0])
        rows = list(self.session.scalars(stmt.limit(page_size + 1)))
        return page_of(rows, page_size, lambda v: [v.seq])

    def protocols_elsewhere(self, version_id: str) -> tuple[set[str], int]:
        """The protocols of every version but ``version_id``, and how many those are."""
        others = sa.select(sa.func.count()).select_from(Version).where(Version.id != version_id)
        protocols = sa.select(ManifestRow.protocol).where(
            ManifestRow.version_id != version_id).distinct()
        return set(self.session.scalars(protocols)), int(self.session.scalar(others) or 0)

    def insert_manifest_rows(self, version_id: str, frame: pl.DataFrame) -> None:
        """Bulk insert; ``frame`` has the identity columns, ``manifest_row_id``,
        ``position``, ``row_count`` and ``metadata`` (JSON text)."""
        self._bulk_insert(
            _table(ManifestRow),
            frame,
            pl.lit(version_id).alias("version_id"),
            pl.col("manifest_row_id").cast(pl.Int64),
            pl.col("position").cast(pl.Int64),
            pl.col("set_id").cast(pl.String),
            pl.col("cell_id").cast(pl.String),
            pl.col("cidx").cast(pl.Int64),
            pl.col("protocol").cast(pl.String),
            pl.col("metadata").cast(pl.String),
            pl.col("row_count").cast(pl.Int64),
        )

    def insert_segments(self, version_id: str, frame: pl.DataFrame) -> None:
        """Bulk insert of a version's segments (``chunk_rows`` as a list column)."""
        self._bulk_insert(
            _table(Segment),
            frame,
            pl.lit(version_id).alias("version_id"),
            pl.col("manifest_row_id").cast(pl.Int64),
            pl.col("ordinal").cast(pl.Int64),
            pl.col("path").cast(pl.String),
            pl.col("format").cast(pl.String),
            pl.col("row_count").cast(pl.Int64),
            _json_int_list("chunk_rows"),
            pl.col("fingerprint").cast(pl.String),
        )

    def load_manifest_rows(self, version_id: str) -> list[ManifestRow]:
        """A version's manifest rows in manifest order."""
        stmt = (
            sa.select(ManifestRow)
            .where(ManifestRow.version_id == version_id)
            .order_by(ManifestRow.position)
        )
        return list(self.session.scalars(stmt))

    def load_segments(self, version_id: str) -> pl.DataFrame:
        """A version's segments with their manifest row's ``manifest_position``."""
        seg, man = Segment.__table__, ManifestRow.__table__
        stmt = (
            sa.select(
                seg.c.manifest_row_id, seg.c.ordinal, seg.c.path, seg.c.format,
                seg.c.row_count, seg.c.chunk_rows, seg.c.fingerprint,
                man.c.position.label("manifest_position"),
            )
            .join(man, sa.and_(
                man.c.version_id == seg.c.version_id,
                man.c.manifest_row_id == seg.c.manifest_row_id,
            ))
            .where(seg.c.version_id == version_id)
            .order_by(man.c.position, seg.c.ordinal)
        )
        rows = self.session.execute(stmt).all()
        return pl.DataFrame(
            [tuple(r) for r in rows],
            schema={
                "manifest_row_id": pl.Int64, "ordinal": pl.Int64, "path": pl.String,
                "format": pl.String, "row_count": pl.Int64,
                "chunk_rows": pl.List(pl.Int64), "fingerprint": pl.String,
                "manifest_position": pl.Int64,
            },
            orient="row",
        )

    def list_segments(
        self, version_id: str, *, page_size: int, page_token: str | None
    ) -> Page[Segment]:
        """A version's segments by ``(manifest_row_id, ordinal)``."""
        stmt = (
            sa.select(Segment)
            .where(Segment.version_id == version_id)
            .order_by(Segment.manifest_row_id, Segment.ordinal)
        )
        after = decode_page_token(page_token, shape=(int, int))
        if after:
            stmt = stmt.where(
                sa.tuple_(Segment.manifest_row_id, Segment.ordinal)
                > sa.tuple_(sa.literal(int(after[0])), sa.literal(int(after[1])))
            )
        rows = list(self.session.scalars(stmt.limit(page_size + 1)))
        return page_of(rows, page_size, lambda s: [s.manifest_row_id, s.ordinal])

    # -- splits -----------------------------------------------------------------------

    def get_split(self, split_id: str) -> SplitRow | None:
        """The split ``split_id``."""
        return self.session.get(SplitRow, split_id)

    def add_split(self, split: SplitRow) -> None:
        """Insert a split row (flushed)."""
        self.session.add(split)
        self.session.flush()

    def insert_assignments(self, split_id: str, frame: pl.DataFrame) -> None:
        """Bulk insert of ``manifest_row_id`` -> ``split``."""
        self._bulk_insert(
            _table(SplitAssignment),
            frame.select(
                pl.lit(split_id).alias("split_id"),
                pl.col("manifest_row_id").cast(pl.Int64),
                pl.col("split").cast(pl.String),
            ),
        )

    def load_assignments(self, split_id: str) -> pl.DataFrame:
        """``manifest_row_id``, ``split`` of a split."""
        table = SplitAssignment.__table__
        rows = self.session.execute(
            sa.select(table.c.manifest_row_id, table.c.split).where(table.c.split_id == split_id)
        ).all()
        return pl.DataFrame(
            [tuple(r) for r in rows],
            schema={"manifest_row_id": pl.Int64, "split": pl.String}, orient="row",
        )

    def get_split_stats(self, split_id: str, side: str, key: str) -> dict[str, Any] | None:
        """The stored statistics of a split's side and columns (JSON), if computed."""
        row = self.session.get(SplitStatsRow, (split_id, side, key))
        return None if row is None else row.stats

    def add_split_stats(self, split_id: str, side: str, key: str, stats: dict[str, Any]) -> None:
        """Store a side's statistics (flushed; a second writer hits the primary key)."""
        self.session.add(SplitStatsRow(split_id=split_id, side=side, columns_key=key,
                                       stats=stats))
        self.session.flush()

    # -- plans ------------------------------------------------------------------------

    def get_plan(self, plan_id: str) -> PlanRow | None:
        """The plan ``plan_id``."""
        return self.session.get(PlanRow, plan_id)

    def add_plan(self, plan: PlanRow) -> None:
        """Insert a plan row (flushed)."""
        self.session.add(plan)
        self.session.flush()

    def add_plan_artifact(self, plan_id: str, data: bytes, *, format_version: int) -> None:
        """Insert a plan's stored artifact (flushed)."""
        self.session.add(PlanArtifactRow(plan_id=plan_id, format=format_version,
                                         n_bytes=len(data), data=data))
        self.session.flush()

    def load_plan_artifact(self, plan_id: str) -> bytes | None:
        """A plan's stored artifact bytes (None if there is none)."""
        table = PlanArtifactRow.__table__
        data = self.session.scalar(sa.select(table.c.data).where(table.c.plan_id == plan_id))
        return bytes(data) if data is not None else None

    # -- retirement -------------------------------------------------------------------

    def retire(self, row: Version | SplitRow | PlanRow, when: datetime) -> None:
        """Set ``retired_at`` once (a row already retired keeps its first time)."""
        if row.retired_at is None:
            row.retired_at = when
            self.session.flush()

    def plan_retired_at(self, plan_id: str) -> datetime | None:
        """When the plan, its split or its version was retired (the earliest), else None."""
        stmt = (
            sa.select(PlanRow.retired_at, SplitRow.retired_at, Version.retired_at)
            .join(SplitRow, SplitRow.id == PlanRow.split_id)
            .join(Version, Version.id == SplitRow.version_id)
            .where(PlanRow.id == plan_id)
        )
        row = self.session.execute(stmt).first()
        times = [t for t in (row or ()) if t is not None]
        return min(times) if times else None

    def split_retired_at(self, split_id: str) -> datetime | None:
        """When the split or its version was retired (the earliest), else None."""
        stmt = (
            sa.select(SplitRow.retired_at, Version.retired_at)
            .join(Version, Version.id == SplitRow.version_id)
            .where(SplitRow.id == split_id)
        )
        row = self.session.execute(stmt).first()
        times = [t for t in (row or ()) if t is not None]
        return min(times) if times else None

    # -- maintenance ------------------------------------------------------------------

    def count_rows(self) -> dict[str, int]:
        """Row count of every content table (tests check that failures store nothing);
        the principals, audit and registration job tables are not content."""
        return {
            table.name: int(self.session.scalar(sa.select(sa.func.count()).select_from(table)) or 0)
            for table in Base.metadata.sorted_tables
            if table.name not in ("api_tokens", "audit_events", "registration_jobs")
        }

    # -- bulk writes ------------------------------------------------------------------

    def _bulk_insert(self, table: sa.Table, frame: pl.DataFrame,
                     *exprs: pl.Expr | str) -> None:
        """Insert the rows of ``frame.select(*exprs)`` (all of ``frame`` when none given),
        made a slice at a time: a collection's rows are never all converted at once."""
        if frame.height == 0:
            return
        columns = [c.name for c in table.columns]
        made = exprs or tuple(columns)
        conn = self.session.connection()
        if conn.dialect.name == "postgresql":
            _copy_into(conn, table.name, columns,
                       (part.select(*made).select(columns) for part in _chunks(frame,
                                                                              _COPY_CHUNK)))
            return
        placeholders = ", ".join("?" for _ in columns)
        names = ", ".join(f'"{c}"' for c in columns)
        sql = f'INSERT INTO "{table.name}" ({names}) VALUES ({placeholders})'
        for part in _chunks(frame, _SQLITE_CHUNK):
            conn.exec_driver_sql(sql, part.select(*made).select(columns).rows())


def _copy_into(conn: sa.Connection, table: str, columns: list[str],
               parts: Iterator[pl.DataFrame]) -> None:
    """``COPY table FROM STDIN`` on the connection's psycopg connection (same transaction),
    one part of the rows as CSV at a time (a collection's rows as one CSV text would be
    tens of megabytes held at once)."""
    raw: Any = conn.connection.dbapi_connection
    names = ", ".join(f'"{c}"' for c in columns)
    with raw.cursor() as cur, cur.copy(
        f'COPY "{table}" ({names}) FROM STDIN WITH (FORMAT csv)'
    ) as copy:
        for chunk in parts:
            buffer = io.BytesIO()
            chunk.write_csv(buffer, include_header=False, null_value="")
            copy.write(buffer.getvalue())


def _table(model: type[Base]) -> sa.Table:
    return cast(sa.Table, model.__table__)


def _chunks(frame: pl.DataFrame, size: int) -> Iterator[pl.DataFrame]:
    for offset in range(0, frame.height, size):
        yield frame.slice(offset, size)


def _json_int_list(column: str) -> pl.Expr:
    """A list-of-integers column as JSON text, vectorized."""
    return (
        pl.lit("[")
        + pl.col(column).cast(pl.List(pl.Int64)).list.eval(pl.element().cast(pl.String))
        .list.join(",")
        + pl.lit("]")
    ).alias(column)
