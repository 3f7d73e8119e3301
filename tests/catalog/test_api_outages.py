"""The catalog under outages, over real HTTP.

* A database that refuses connections answers 503 ``unavailable`` on every route
  (``/readyz`` included); once it is back, the same process serves again, and the SDK
  rides out a short outage by retrying with backoff.
* Registrations hanging on an object store that accepts connections and never
  answers cannot starve ``/healthz`` and ``/readyz``; the store's timeouts end them,
  one request each (no retries).
* They wait on the catalog's own storage threads, so catalog reads answer while they
  hang, and past that pool and its queue they are refused at once (before any of them
  ends); a SQLite file locked by another writer is a 503 after a short busy timeout,
  not a hang.

No wall clock here: "while they hang" and "at once" are orders of events (answered
before the store let go), not durations.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.database import PG_ADMIN_URL
from tests.fixtures.servers import SilentEndpoint, run_catalog_server
from windpipe.sdk import Catalog
from windpipe.services.settings import Settings


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
            assert_error(c.get("/readyz"), 503, "unavailable")
            assert c.get("/healthz").status_code == 200

            sdk = Catalog(url, retries=8)
            reopening = threading.Event()

            def reopen() -> None:
                reopening.set()
                _set_connections(postgres_url, allow=True)

            timer = threading.Timer(1.0, reopen)
            timer.start()
            names = [d.name for d in sdk.datasets()]  # retried through the outage
            answered_after_reopening = reopening.is_set()
            timer.join()
            sdk.close()
        finally:
            _set_connections(postgres_url, allow=True)
        assert names == ["d"]
        assert answered_after_reopening  # it waited for the database, not answered from elsewhere
        assert c.get("/readyz").status_code == 200
        assert c.get("/v1/datasets/d").status_code == 200


@pytest.mark.slow
def test_health_answers_while_registrations_hang_on_a_dead_store(
    sqlite_url: str, tmp_path: Path, silent_store: SilentEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
                        s3_endpoint=silent_store.url, s3_allow_http=True,
                        s3_timeout_s=4.0, s3_connect_timeout_s=1.0, s3_max_retries=0,
                        allowed_roots=("s3://bucket",), storage_workers=45)
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        def register(i: int) -> httpx.Response:
            return c.post(f"/v1/datasets/h{i}/versions",
                          json={"root": f"s3://bucket/p{i}", "manifest": "manifest.parquet"})

        with ThreadPoolExecutor(45) as pool:
            hung = [pool.submit(register, i) for i in range(45)]
            silent_store.wait_accepted(45)  # all 45 wait on the store (45 storage threads)
            health = [c.get(path).status_code
                      for path in ("/healthz", "/readyz", "/healthz", "/readyz")]
            still_hung = sum(not f.done() for f in hung)  # the store's timeout is 4 s away
            answers = [f.result() for f in hung]
    assert health == [200] * 4
    assert still_hung == 45  # health answered while every registration hung
    assert {r.status_code for r in answers} == {503}
    assert {r.json()["error"]["type"] for r in answers} == {"unavailable"}
    # the store's timeouts ended them: one request each, not obstore's retries
    assert silent_store.accepted == 45


def test_a_locked_sqlite_database_is_503_within_seconds(sqlite_url: str, tmp_path: Path) -> None:
    """Another writer holding the SQLite file's lock (here: an open exclusive transaction)
    makes a registration answer 503 ``unavailable`` after the short busy timeout, not
    hang; reads keep answering (WAL), and the lock's release ends the outage. (A busy
    timeout shorter than the default: each statement that meets the lock waits it.)"""
    write_small_dataset(tmp_path / "data")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
                        sqlite_busy_timeout_s=0.5)
    body = {"root": (tmp_path / "data").as_uri(), "manifest": "manifest.parquet"}
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=20) as c:
        assert c.get("/v1/datasets").status_code == 200  # migrated
        holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            # answered while the lock is still held: the busy timeout ended the wait
            error = assert_error(c.post("/v1/datasets/d/versions", json=body),
                                 503, "unavailable")
            assert "locked" in error["message"]
            assert error["details"]["retryable"] is True
            assert c.get("/v1/datasets").json()["items"] == []
        finally:
            holder.rollback()
            holder.close()
        assert c.post("/v1/datasets/d/versions", json=body).status_code == 201


def test_catalog_reads_answer_while_registrations_hang(
    sqlite_url: str, tmp_path: Path, silent_store: SilentEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Registrations waiting on a hung object store run on the catalog's own storage
    threads: ``GET /v1/datasets`` answers meanwhile, and registrations past the pool and
    its queue are refused at once with 503 ``unavailable``: before the pool frees (the
    store holds every running one until the test hangs up; its timeout is far away)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
                        s3_endpoint=silent_store.url, s3_allow_http=True,
                        s3_timeout_s=200.0, s3_connect_timeout_s=1.0, s3_max_retries=0,
                        allowed_roots=("s3://bucket",), storage_workers=4, storage_queue=2)
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        def register(i: int) -> httpx.Response:
            return c.post(f"/v1/datasets/h{i}/versions",
                          json={"root": f"s3://bucket/p{i}", "manifest": "manifest.parquet"})

        with ThreadPoolExecutor(45) as pool:
            hung = [pool.submit(register, i) for i in range(45)]
            silent_store.wait_accepted(4)  # four run, waiting on the store
            refused_first = []
            for future in as_completed(hung):  # blocks for good if a refusal waited
                refused_first.append(future.result())
                if len(refused_first) == 45 - 6:
                    break
            reads = [c.get("/v1/datasets").status_code for _ in range(5)]
            waiting = sum(not f.done() for f in hung)
            silent_store.hang_up()  # the store lets go: the six admitted ones end
            answers = [f.result() for f in hung]
    assert reads == [200] * 5  # answered while four registrations hung on the store
    assert waiting == 6  # four running, two in the queue, none ended before the hang-up
    assert {r.status_code for r in answers} == {503}
    errors = [r.json()["error"] for r in answers]
    assert {e["type"] for e in errors} == {"unavailable"}
    busy = [e for e in errors if "busy with registrations" in e["message"]]
    assert len(busy) == 45 - 6  # past the 4 threads and 2 waiting places
    assert all(e["details"]["retryable"] is True for e in busy)
    # the refusals are the ones that answered while the pool was full
    assert all("busy with registrations" in r.json()["error"]["message"]
               for r in refused_first)
