"""A PostgreSQL database of a benchmark's own, made beside an admin URL's and dropped
after, so a run never shares tables with another run or with the tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

__all__ = ["fresh_database"]


@contextmanager
def fresh_database(admin_url: str, *, prefix: str = "wp_bench") -> Iterator[str]:
    """The URL of a new database on ``admin_url``'s server (named ``prefix``, the
    process id and a random part), dropped on exit even while connections remain."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
