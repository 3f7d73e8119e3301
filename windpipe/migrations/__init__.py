"""Alembic migrations of the catalog database (SQLite and PostgreSQL).

:func:`upgrade_database` (a URL) and :func:`upgrade_engine` (an open engine, as the
catalog app does at start-up) run the revisions of ``versions/``. No ``alembic.ini``
is needed: :func:`alembic_config` points Alembic at this package wherever it is
installed. The revisions are self-contained (they import nothing of the catalog),
and ``tests/catalog/test_migrations.py`` checks that they build exactly the tables
of ``windpipe.catalog.models``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

__all__ = ["alembic_config", "upgrade_database", "upgrade_engine"]

_HERE = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    """An Alembic config for the database at ``url`` (a SQLAlchemy URL)."""
    config = Config()
    config.set_main_option("script_location", str(_HERE))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_database(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database behind ``engine`` (in one transaction on its connection)."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
