"""Alembic migrations of the catalog database (SQLite and PostgreSQL).

Use :func:`alembic_config` rather than an ``alembic.ini``: it points Alembic at this
package wherever it is installed, so ``services.database.upgrade_database(url)``
works from a wheel as well as from a checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

__all__ = ["alembic_config"]

_HERE = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    """An Alembic config for the database at ``url`` (a SQLAlchemy URL)."""
    config = Config()
    config.set_main_option("script_location", str(_HERE))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config
