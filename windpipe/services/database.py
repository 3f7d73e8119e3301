"""Database engines: SQLite (embedded default) and PostgreSQL (production).

Nothing connects at import; whoever owns a process (the app's lifespan, the CLI,
a test fixture) calls :func:`create_engine` and disposes of it.

A database that cannot answer (down, unreachable, a dropped connection, a full pool,
a SQLite file locked past the busy timeout) raises one of :data:`DATABASE_DOWN`;
:func:`database_unavailable` is the ``unavailable`` (503, retryable) error the
services answer for it, and :func:`translate_outage` turns one into it at a seam.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from windpipe.services.contract.errors import Unavailable, WindpipeError
from windpipe.services.logging import get_logger
from windpipe.services.settings import Settings

__all__ = [
    "DATABASE_DOWN",
    "create_engine",
    "database_unavailable",
    "is_database_down",
    "is_database_locked",
    "session_scope",
    "translate_outage",
]

DATABASE_DOWN: tuple[type[Exception], ...] = (
    sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)
_BUSY_TIMEOUT_S: float = Settings.model_fields["sqlite_busy_timeout_s"].default
_log = get_logger("windpipe.database")


def is_database_down(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot answer now (not that a statement is wrong):
    one of :data:`DATABASE_DOWN`, or a driver error that invalidated its connection."""
    return isinstance(exc, DATABASE_DOWN) or (
        isinstance(exc, sa_exc.DBAPIError) and bool(exc.connection_invalidated))


def is_database_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked": another writer held the file's
    one write lock past the busy timeout (a long write, not an outage)."""
    return "database is locked" in str(getattr(exc, "orig", exc))


def database_unavailable(exc: BaseException, *, who: str = "the catalog",
                         **details: Any) -> WindpipeError:
    """The ``unavailable`` error (503, ``details.retryable``) of a database that cannot
    answer; the driver's text (it may name the database's address) stays out of it
    (``details.request_id``, when given, names the log line that has it)."""
    if is_database_locked(exc):
        message = (f"{who} database is locked by another writer (SQLite busy timeout "
                   "passed); retry later")
    else:
        message = f"{who} database is unavailable ({type(exc).__name__}); retry later"
    if "request_id" in details:
        message += f" (request id {details['request_id']}: the server log has the details)"
    return Unavailable(message, details=details)


@contextmanager
def translate_outage(*, who: str = "the catalog", **details: Any) -> Iterator[None]:
    """Raise :func:`database_unavailable` for a database outage inside the block (the
    driver's own text goes to the log, under the answer's request id)."""
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:
        if not is_database_down(exc):
            raise
        request_id = uuid.uuid4().hex[:16]
        _log.warning("database.unavailable", request_id=request_id, error=type(exc).__name__,
                     detail=str(getattr(exc, "orig", exc))[:500])
        raise database_unavailable(exc, who=who, request_id=request_id, **details) from exc


def create_engine(url: str, *, sqlite_busy_timeout_s: float = _BUSY_TIMEOUT_S,
                  **kwargs: Any) -> Engine:
    """An engine for ``url`` with windpipe's settings.

    SQLite gets WAL journaling, foreign keys and a short busy timeout
    (``sqlite_busy_timeout_s``: a statement waits that long for another writer's lock,
    then fails with "database is locked", answered as ``unavailable``), so one catalog
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
        kwargs.setdefault("connect_args", {"check_same_thread": False,
                                           "timeout": sqlite_busy_timeout_s})
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
