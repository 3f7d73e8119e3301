"""Alembic environment: online migrations against ``sqlalchemy.url``.

SQLite runs in batch mode (``render_as_batch``), which copies a table to alter it;
the revisions name every constraint as ``windpipe.catalog.models``' naming convention does,
so the names stay stable for that. A caller may pass an open connection in
``config.attributes["connection"]``. Revisions are written by hand (no
autogenerate, so nothing here imports the catalog); the migration test compares
the result with the models.
"""

from __future__ import annotations

from alembic import context

from windpipe.services.database import create_engine

config = context.config
target_metadata = None


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("windpipe migrations run online only")
run_migrations_online()
