"""Alembic migrations: upgrade, downgrade, upgrade again, and the schema equals the models."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from windpipe.catalog.models import Base
from windpipe.migrations import alembic_config, upgrade_database
from windpipe.services.database import create_engine


def _diffs(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    upgrade_database(database_url)
    assert _diffs(database_url) == []
    assert set(Base.metadata.tables) <= _tables(database_url)
    command.downgrade(alembic_config(database_url), "base")
    assert _tables(database_url) <= {"alembic_version"}
    upgrade_database(database_url)
    assert _diffs(database_url) == []
    upgrade_database(database_url)  # at head: a no-op
    assert _diffs(database_url) == []
