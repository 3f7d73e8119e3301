"""Retiring versions, splits and plans over real HTTP (SQLite and PostgreSQL): soft, idempotent,
hidden from listings, new work refused with 409, flowing down from version to plan."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset

PLAN: dict[str, Any] = {
    "default_window": {"batch_size": 2, "seq_len": 8},
    "inputs": {"cycling": ["current_a", "voltage_v"]}, "targets": {"cycling": ["voltage_v"]},
}
OTHER_PLAN = {**PLAN, "default_window": {"batch_size": 3, "seq_len": 8}}
SPLIT = {"strategy": "sample", "fraction": 0.25, "seed": 1}


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=120) as c:
        yield c


def _version(client: httpx.Client, tmp_path: Path, name: str = "d") -> str:
    root = tmp_path / name
    write_small_dataset(root)
    response = client.post(f"/v1/datasets/{name}/versions",
                           json={"root": root.resolve().as_uri(), "manifest": "manifest.parquet"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _post(client: httpx.Client, path: str, body: dict[str, Any], status: int) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    return dict(response.json())


def test_retiring_a_plan_refuses_it_and_nothing_else(client: httpx.Client, tmp_path: Path,
                                                    database_url: str) -> None:
    version = _version(client, tmp_path)
    split = _post(client, f"/v1/versions/{version}/splits", SPLIT, 201)["id"]
    plan = _post(client, f"/v1/splits/{split}/plans", PLAN, 201)["id"]
    assert client.get(f"/v1/plans/{plan}").json()["retired_at"] is None
    before = table_counts(database_url)

    first = client.delete(f"/v1/plans/{plan}")
    assert first.status_code == 200, first.text
    when = first.json()["retired_at"]
    assert when is not None
    again = client.delete(f"/v1/plans/{plan}")
    assert again.json()["retired_at"] == when  # idempotent: the first time stays
    assert table_counts(database_url) == before  # soft: nothing deleted

    assert client.get(f"/v1/plans/{plan}").json()["retired_at"] == when
    assert datetime.fromisoformat(when).tzinfo is not None  # UTC on SQLite too
    assert client.get(f"/v1/plans/{plan}/report").status_code == 200
    err = assert_error(client.post(f"/v1/splits/{split}/plans", json=PLAN), 409, "conflict")
    assert err["details"]["plan"] == plan
    _post(client, f"/v1/splits/{split}/plans", OTHER_PLAN, 201)  # the split is live
    assert client.get(f"/v1/splits/{split}").json()["retired_at"] is None
    assert_error(client.delete("/v1/plans/p-nope"), 404, "not_found")


def test_retiring_a_split_or_version_flows_down(client: httpx.Client, tmp_path: Path) -> None:
    version = _version(client, tmp_path)
    other = _version(client, tmp_path / "second", name="d")
    split = _post(client, f"/v1/versions/{version}/splits", SPLIT, 201)["id"]
    plan = _post(client, f"/v1/splits/{split}/plans", PLAN, 201)["id"]

    retired = client.delete(f"/v1/splits/{split}").json()["retired_at"]
    assert retired is not None
    assert client.get(f"/v1/plans/{plan}").json()["retired_at"] == retired
    err = assert_error(client.post(f"/v1/splits/{split}/plans", json=OTHER_PLAN), 409,
                       "conflict")
    assert err["details"]["split"] == split
    second_split = _post(client, f"/v1/versions/{version}/splits",
                         {**SPLIT, "seed": 2}, 201)["id"]  # the version is live

    listed = [v["id"] for v in client.get("/v1/datasets/d/versions").json()["items"]]
    assert listed == [version, other]
    gone = client.delete(f"/v1/versions/{version}").json()["retired_at"]
    assert gone is not None
    listed = [v["id"] for v in client.get("/v1/datasets/d/versions").json()["items"]]
    assert listed == [other]
    every = client.get("/v1/datasets/d/versions", params={"include_retired": "true"}).json()
    assert [v["id"] for v in every["items"]] == [version, other]
    assert client.get(f"/v1/versions/{version}").json()["retired_at"] == gone
    assert_error(client.post(f"/v1/versions/{version}/splits", json={**SPLIT, "seed": 3}),
                 409, "conflict")
    assert client.get(f"/v1/splits/{second_split}").json()["retired_at"] == gone
    assert_error(client.post(f"/v1/splits/{second_split}/plans", json=PLAN), 409, "conflict")
    assert client.get(f"/v1/plans/{plan}").json()["retired_at"] == retired  # the earliest
    _post(client, f"/v1/versions/{other}/splits", SPLIT, 201)
    assert_error(client.delete("/v1/versions/v-nope"), 404, "not_found")
    assert_error(client.delete("/v1/splits/s-nope"), 404, "not_found")
