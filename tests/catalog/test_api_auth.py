"""Bearer-token auth and the 500 envelope (SQLite only: nothing database-specific)."""

from __future__ import annotations

from pathlib import Path

import httpx
from pydantic import SecretStr

from tests.catalog.api_support import assert_error
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings


def test_bearer_token(sqlite_url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path,
                        admin_token=SecretStr("s3cret"), flight_locations=("grpc://127.0.0.1:9",))
    with run_catalog_server(settings) as url, httpx.Client(base_url=url) as client:
        assert client.get("/healthz").status_code == 200
        denied = client.get("/v1/config")
        assert_error(denied, 401, "unauthenticated")
        assert denied.headers["www-authenticate"] == "Bearer"
        assert_error(client.get("/v1/config", headers={"Authorization": "Bearer wrong"}),
                     401, "unauthenticated")
        ok = client.get("/v1/config", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert ok.json()["flight_locations"] == ["grpc://127.0.0.1:9"]
        assert ok.json()["auth"] == "bearer"
