"""Database engines: SQLite (embedded default) and PostgreSQL (production).

Nothing connects at import; whoever owns a process (the app's lifespan, the CLI,
a test fixture) calls :func:`create_engine` and disposes of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["create_engine", "session_scope"]


def create_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with windpipe's settings.

    SQLite gets WAL journaling, foreign keys and a busy timeout, so one catalog
    process can serve many threads; PostgreSQL URLs without a driver use psycopg 3,
    with a 5 s connect timeout, a 10 s wait for a pooled connection and a ping before
    reuse (a restarted database is reconnected to without restarting the catalog).
    """
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
        engine = sa.create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_timeout", 10)
    kwargs.setdefault("connect_args", {"connect_timeout": 5})
    return sa.create_engine(url, **kwargs)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on any error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
