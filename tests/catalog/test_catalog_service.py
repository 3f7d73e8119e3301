"""Service rules that HTTP cannot provoke: rollback of a failing registration, races."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from windpipe.catalog import service
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import Version
from windpipe.catalog.repository import Repository
from windpipe.migrations import upgrade_database
from windpipe.services.database import create_engine


def test_failure_inside_the_transaction_stores_nothing(
    catalog_server: str, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_small_dataset(tmp_path)

    def broken(self: Repository, version_id: str, frame: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Repository, "insert_segments", broken)
    with httpx.Client(base_url=catalog_server, timeout=60) as client:
        response = client.post("/v1/datasets/d/versions", json={
            "root": tmp_path.as_uri(), "manifest": "manifest.parquet",
        })
        error = assert_error(response, 500, "internal")
        assert "disk on fire" not in response.text
        assert error["details"] == {}
    assert set(table_counts(database_url).values()) == {0}


def test_concurrent_identical_registrations_agree(database_url: str, tmp_path: Path) -> None:
    write_small_dataset(tmp_path)
    upgrade_database(database_url)
    engine = create_engine(database_url)
    ctx = CatalogContext.from_engine(engine)
    results: list[service.Created[Version]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def register() -> None:
        barrier.wait()
        try:
            results.append(service.register_version(
                ctx, "d", root=tmp_path.as_uri(), manifest="manifest.parquet"
            ))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert sorted(r.created for r in results) == [False, False, True]
        assert len({r.value.id for r in results}) == 1
        assert table_counts(database_url)["versions"] == 1
    finally:
        engine.dispose()
