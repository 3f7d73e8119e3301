"""The pages' own reads on SQLite and PostgreSQL: the dataset search takes its text
literally (``%`` and ``_`` are characters, not wildcards), ignores case, pages by offset
within what a scoped caller sees, and every page is bounded."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

import pytest

from windpipe.catalog.context import CatalogContext
from windpipe.catalog.repository import Repository
from windpipe.catalog.ui.queries import MAX_LIMIT, bounded, find_datasets
from windpipe.migrations import upgrade_engine
from windpipe.services.database import create_engine, session_scope

NAMES = ["a%b", "a_b", "aXb", "lab-1", "lab-2", "Lab-3", "other"]


@pytest.fixture
def ctx(database_url: str) -> Iterator[CatalogContext]:
    engine = create_engine(database_url)
    upgrade_engine(engine)
    context = CatalogContext.from_engine(engine)
    with session_scope(context.sessions) as session:
        for name in NAMES:
            Repository(session).add_dataset(name)
    try:
        yield context
    finally:
        engine.dispose()


def _names(ctx: CatalogContext, query: str, *, limit: int = 50, offset: int = 0,
           glob: str | None = None) -> tuple[list[str], bool]:
    visible = None if glob is None else (lambda name: fnmatch.fnmatchcase(name, glob))
    rows, more = find_datasets(ctx, query=query, limit=limit, offset=offset, visible=visible)
    return [r.name for r in rows], more


def test_search_is_literal_and_ignores_case(ctx: CatalogContext):
    assert _names(ctx, "%") == (["a%b"], False)
    assert _names(ctx, "_") == (["a_b"], False)
    assert _names(ctx, "LAB") == (sorted(["lab-1", "lab-2", "Lab-3"]), False)
    assert _names(ctx, "") == (sorted(NAMES), False)
    assert _names(ctx, "nothing") == ([], False)


def test_pages_by_offset_within_what_the_caller_sees(ctx: CatalogContext):
    assert _names(ctx, "", limit=2) == (sorted(NAMES)[:2], True)
    assert _names(ctx, "", limit=2, offset=6) == (sorted(NAMES)[6:], False)
    assert _names(ctx, "", glob="lab-*") == (["lab-1", "lab-2"], False)
    assert _names(ctx, "", glob="lab-*", limit=1) == (["lab-1"], True)
    assert _names(ctx, "", glob="lab-*", limit=1, offset=1) == (["lab-2"], False)
    assert _names(ctx, "x", glob="lab-*") == ([], False)  # "aXb" matches, unseen


def test_bounds():
    assert bounded(10**9, -5) == (MAX_LIMIT, 0)
    assert bounded(0, 3) == (1, 3)
