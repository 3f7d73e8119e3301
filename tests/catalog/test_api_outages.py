"""The catalog under outages, over real HTTP.

* A database that refuses connections answers 503 ``unavailable`` on every route
  (and on ``/readyz`` within a second); once it is back, the same process serves
  again, and the SDK rides out a short outage by retrying with backoff.
* Registrations hanging on an object store that accepts connections and never
  answers cannot starve ``/healthz`` and ``/readyz``; the store's timeouts end them.
* They wait on the catalog's own storage threads, so catalog reads keep
  their latency, and past that pool and its queue they are refused at once; a SQLite
  file locked by another writer is a 503 after a short busy timeout, not a hang.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from sdk import Catalog
from services.settings import Settings
from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.database import PG_ADMIN_URL
from tests.fixtures.servers import run_catalog_server


def _set_connections(url: str, *, allow: bool) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def test_database_outage_is_503_and_recovers_without_restart(
    postgres_url: str, tmp_path: Path,
) -> None:
    write_small_dataset(tmp_path / "data")
    settings = Settings(database_url=postgres_url, data_dir=tmp_path / "c", log_level="ERROR")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=30) as c:
        body = {"root": (tmp_path / "data").as_uri(), "manifest": "manifest.parquet"}
        assert c.post("/v1/datasets/d/versions", json=body).status_code == 201
        assert c.get("/readyz").status_code == 200
        _set_connections(postgres_url, allow=False)
        try:
            for path in ("/v1/datasets", "/v1/datasets/d", "/v1/datasets/d/versions"):
                error = assert_error(c.get(path), 503, "unavailable")
                assert "database" in error["message"]
            assert_error(c.post("/v1/datasets/e/versions", json=body), 503, "unavailable")
            t0 = time.monotonic()
            assert_error(c.get("/readyz"), 503, "unavailable")
            assert time.monotonic() - t0 < 1.5
            assert c.get("/healthz").status_code == 200

            sdk = Catalog(url, retries=8)
            timer = threading.Timer(1.0, _set_connections, (postgres_url,),
                                    {"allow": True})
            timer.start()
            t0 = time.monotonic()
            names = [d.name for d in sdk.datasets()]  # retried through the outage
            waited = time.monotonic() - t0
            timer.join()
            sdk.close()
        finally:
            _set_connections(postgres_url, allow=True)
        assert names == ["d"]
        assert waited >= 0.9  # it did wait for the database, not answer from elsewhere
        assert c.get("/readyz").status_code == 200
        assert c.get("/v1/datasets/d").status_code == 200


@pytest.mark.slow
def test_health_answers_while_registrations_hang_on_a_dead_store(
    sqlite_url: str, tmp_path: Path, silent_endpoint: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
                        s3_endpoint=silent_endpoint, s3_allow_http=True,
                        s3_timeout_s=4.0, s3_connect_timeout_s=1.0, s3_max_retries=0,
                        allowed_roots=("s3://bucket",), storage_workers=45)
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        def register(i: int) -> httpx.Response:
            return c.post(f"/v1/datasets/h{i}/versions",
                          json={"root": f"s3://bucket/p{i}", "manifest": "manifest.parquet"})

        with ThreadPoolExecutor(45) as pool:
            hung = [pool.submit(register, i) for i in range(45)]
            time.sleep(1.0)  # all 45 wait on the store (45 storage threads here)
            assert not any(f.done() for f in hung)
            latencies = []
            for path in ("/healthz", "/readyz", "/healthz", "/readyz"):
                t0 = time.monotonic()
                assert c.get(path).status_code == 200
                latencies.append(time.monotonic() - t0)
            t0 = time.monotonic()
            answers = [f.result() for f in hung]
            ended = time.monotonic() - t0
    assert max(latencies) < 1.0
    assert {r.status_code for r in answers} == {503}
    assert {r.json()["error"]["type"] for r in answers} == {"unavailable"}
    assert ended < 60  # the store's timeouts end them (not obstore's 3-minute retries)


def test_a_locked_sqlite_database_is_503_within_seconds(sqlite_url: str, tmp_path: Path) -> None:
    """Another writer holding the SQLite file's lock (here: an open exclusive transaction)
    makes a registration answer 503 ``unavailable`` after the short busy timeout, not
    hang; reads keep answering (WAL), and the lock's release ends the outage."""
    write_small_dataset(tmp_path / "data")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR")
    body = {"root": (tmp_path / "data").as_uri(), "manifest": "manifest.parquet"}
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=20) as c:
        assert c.get("/v1/datasets").status_code == 200  # migrated
        holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            t0 = time.monotonic()
            error = assert_error(c.post("/v1/datasets/d/versions", json=body),
                                 503, "unavailable")
            waited = time.monotonic() - t0
            assert "locked" in error["message"]
            assert error["details"]["retryable"] is True
            assert c.get("/v1/datasets").json()["items"] == []
        finally:
            holder.rollback()
            holder.close()
        assert waited < 6.0, waited  # before: 30 s per statement (past 60 s in all)
        assert c.post("/v1/datasets/d/versions", json=body).status_code == 201


def test_catalog_reads_keep_their_latency_while_registrations_hang(
    sqlite_url: str, tmp_path: Path, silent_endpoint: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Registrations waiting on a hung object store run on the catalog's own storage
    threads: ``GET /v1/datasets`` answers at once meanwhile, and registrations past the
    pool and its queue are refused at once with 503 ``unavailable``."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
                        s3_endpoint=silent_endpoint, s3_allow_http=True,
                        s3_timeout_s=2.0, s3_connect_timeout_s=1.0, s3_max_retries=0,
                        allowed_roots=("s3://bucket",), storage_workers=4, storage_queue=2)
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        def register(i: int) -> tuple[httpx.Response, float]:
            t0 = time.monotonic()
            response = c.post(f"/v1/datasets/h{i}/versions",
                              json={"root": f"s3://bucket/p{i}", "manifest": "manifest.parquet"})
            return response, time.monotonic() - t0

        with ThreadPoolExecutor(45) as pool:
            hung = [pool.submit(register, i) for i in range(45)]
            time.sleep(0.8)  # six wait on the store (four running), the others were refused
            latencies = []
            for _ in range(5):
                t0 = time.monotonic()
                assert c.get("/v1/datasets").status_code == 200
                latencies.append(time.monotonic() - t0)
            waiting = sum(not f.done() for f in hung)
            answers = [f.result() for f in hung]
    assert max(latencies) < 0.5, latencies  # before: ~2 s (the store's timeout)
    assert waiting >= 4
    assert {r.status_code for r, _ in answers} == {503}
    errors = [r.json()["error"] for r, _ in answers]
    assert {e["type"] for e in errors} == {"unavailable"}
    busy = [(e, s) for e, (_, s) in zip(errors, answers, strict=True)
            if "busy with registrations" in e["message"]]
    assert len(busy) >= 45 - 6  # past the 4 threads and 2 waiting places
    assert all(e["details"]["retryable"] is True and s < 1.0 for e, s in busy)
