"""Text a database cannot store (a NUL character, a lone surrogate) is refused where the
request is validated, with the same 422 naming the field on SQLite and PostgreSQL,
before anything is read or written; clean text after it is stored as usual."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from pydantic import SecretStr

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings

NUL, LONE = "\x00", "\ud800"
ADMIN = {"authorization": "Bearer adm1n"}


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """``body`` as JSON with every non-ASCII character escaped: a lone surrogate
    travels as ``\\ud800``, as any JSON client may send it."""
    return client.post(path, content=json.dumps(body), headers={
        **ADMIN, "content-type": "application/json"})


def _refused(response: httpx.Response, field: str, kind: str = "invalid_request") -> str:
    error = assert_error(response, 422, kind)
    assert field in error["message"], error
    assert "NUL" in error["message"] or "surrogate" in error["message"], error
    return str(error["message"])


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Any:
    settings = Settings(database_url=database_url, data_dir=tmp_path / "catalog",
                        admin_token=SecretStr("adm1n"), log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c


def test_a_registration_with_text_no_database_stores_is_a_422_naming_the_field(
        client: httpx.Client, database_url: str, tmp_path: Path) -> None:
    root = tmp_path / "data"
    rows: list[dict[str, Any]] = pq.read_table(write_small_dataset(root)).to_pylist()
    uri = root.as_uri()

    def rows_with(i: int, **changed: Any) -> list[dict[str, Any]]:
        return [{**row, **changed} if n == i else row for n, row in enumerate(rows)]

    versions = "/v1/datasets/d/versions"
    _refused(_post(client, versions, {"root": uri, "rows": rows_with(1, set_id=f"s{NUL}")}),
             "body.rows.1: Value error, set_id: holds a NUL")
    _refused(_post(client, versions, {"root": uri, "rows": rows_with(0, protocol=f"c{LONE}")}),
             "body.rows.0: Value error, protocol: holds a lone surrogate")
    _refused(_post(client, versions, {"root": uri, "rows": rows_with(2, **{f"k{NUL}": 1})}),
             "body.rows.2: Value error, the key 'k\\x00'")
    _refused(_post(client, versions, {"root": uri, "rows": rows, "description": LONE}),
             "body.description")
    _refused(_post(client, versions, {"root": uri + NUL, "rows": rows}), "body.root")
    pattern = {"root": uri, "pattern": "seg/{cell_id}/{cidx}/{protocol}.parquet"}
    _refused(_post(client, versions, {**pattern, "set_id": f"a{NUL}"}), "body.set_id")
    _refused(_post(client, versions, {**pattern, "set_id": "a", "protocol": f"x{NUL}"}),
             "body.protocol")
    _refused(_post(client, versions, {**pattern, "metadata_rows": [{"cell_id": LONE}]}),
             "body.metadata_rows.0")
    assert table_counts(database_url)["versions"] == 0

    version = _post(client, versions, {"root": uri, "rows": rows, "description": "clean"})
    assert version.status_code == 201, version.text
    assert table_counts(database_url)["versions"] == 1


def test_split_plan_and_token_bodies_refuse_text_no_database_stores(
        client: httpx.Client, database_url: str, tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_small_dataset(root)
    version = _post(client, "/v1/datasets/d/versions",
                    {"root": root.as_uri(), "manifest": "manifest.parquet"})
    assert version.status_code == 201, version.text
    splits = f"/v1/versions/{version.json()['id']}/splits"
    _refused(_post(client, splits, {"strategy": "provide", "provided": [{"set_id": f"s{NUL}"}]}),
             "provided.0.set_id", kind="invalid_config")
    _refused(_post(client, splits, {"strategy": "sample", "group_by": [f"cell{LONE}"]}),
             "group_by.0", kind="invalid_config")
    split = _post(client, splits, {"strategy": "sample", "fraction": 0.5})
    assert split.status_code == 201, split.text

    plans = f"/v1/splits/{split.json()['id']}/plans"
    plan = {"default_window": {"batch_size": 2, "seq_len": 8},
            "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}
    _refused(_post(client, plans, {**plan, "split": f"tr{LONE}ain"}), "split",
             kind="invalid_config")
    _refused(_post(client, plans, {**plan, "inputs": {"cycling": [f"v{NUL}"]}}),
             "inputs.cycling.0", kind="invalid_config")
    _refused(_post(client, plans, {**plan, "inputs": {f"cyc{NUL}": ["voltage_v"]}}),
             "the key 'cyc\\x00' of inputs", kind="invalid_config")
    _refused(_post(client, f"/v1/splits/{split.json()['id']}/stats",
                   {"columns": [f"v{NUL}"]}), "body.columns.0")
    _refused(_post(client, "/v1/tokens", {"name": "t1", "role": "reader",
                                          "datasets": f"lab-{NUL}"}), "body.datasets")
    counts = table_counts(database_url)
    assert (counts["splits"], counts["plans"]) == (1, 0)
    assert client.get("/v1/tokens", headers=ADMIN).json()["items"] == []

    assert _post(client, plans, plan).status_code == 201
    assert _post(client, "/v1/tokens", {"name": "t1", "role": "reader",
                                        "datasets": "lab-*"}).status_code == 201


def test_a_path_id_no_database_stores_is_still_audited(client: httpx.Client) -> None:
    """The audit trail keeps the refused request, its target spelled with escapes."""
    answer = _post(client, "/v1/versions/v-%00x/splits", {"strategy": "sample"})
    assert answer.status_code in (404, 422), answer.text
    events = client.get("/v1/audit", headers=ADMIN, params={"page_size": 500}).json()["items"]
    targets = [e["target"] for e in events if e["action"] == "create_split"]
    assert targets == ["version_id=v-\\x00x"], events
