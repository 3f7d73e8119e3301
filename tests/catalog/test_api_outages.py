"""The catalog under outages, over real HTTP (issue 11).

* A database that refuses connections answers 503 ``unavailable`` on every route
  (and on ``/readyz`` within a second); once it is back, the same process serves
  again, and the SDK rides out a short outage by retrying with backoff.
* Registrations hanging on an object store that accepts connections and never
  answers cannot starve ``/healthz`` and ``/readyz``; the store's timeouts end them.
"""

from __future__ import annotations

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
                        allowed_roots=("s3://bucket",))
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        def register(i: int) -> httpx.Response:
            return c.post(f"/v1/datasets/h{i}/versions",
                          json={"root": f"s3://bucket/p{i}", "manifest": "manifest.parquet"})

        with ThreadPoolExecutor(45) as pool:
            hung = [pool.submit(register, i) for i in range(45)]
            time.sleep(1.0)  # every worker thread of the catalog is now blocked
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
