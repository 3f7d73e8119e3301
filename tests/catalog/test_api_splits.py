"""Splits over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pyarrow as pa
import pytest

from tests.catalog.api_support import (
    assert_error,
    get_all,
    table_counts,
    write_small_dataset,
)
from windpipe.catalog.splits import assign_splits, split_counts
from windpipe.services.contract.configs import ValidationConfig
from windpipe.services.synth import SynthResult


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=60) as c:
        yield c


@pytest.fixture
def version_id(client: httpx.Client, synth_dataset: SynthResult) -> str:
    response = client.post("/v1/datasets/synth/versions", json={
        "root": synth_dataset.path.as_uri(), "manifest": "manifest.parquet",
    })
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _index(client: httpx.Client, path: str) -> pl.DataFrame:
    response = client.get(path, params={"format": "arrow"})
    assert response.status_code == 200, response.text
    frame = pl.from_arrow(pa.ipc.open_stream(io.BytesIO(response.content)).read_all())
    assert isinstance(frame, pl.DataFrame)
    return frame


def test_create_split_idempotent_with_counts(
    client: httpx.Client, version_id: str, database_url: str
) -> None:
    config = ValidationConfig.sample(0.3, seed=5)
    created = client.post(f"/v1/versions/{version_id}/splits",
                          json=config.model_dump(mode="json"))
    assert created.status_code == 201, created.text
    split = created.json()
    assert split["id"].startswith("s-")
    assert split["version_id"] == version_id

    again = client.post(f"/v1/versions/{version_id}/splits", json={"strategy": "sample",
                                                                    "fraction": 0.3, "seed": 5})
    assert again.status_code == 200
    assert again.json()["id"] == split["id"]
    assert client.get(f"/v1/splits/{split['id']}").json() == split

    index = _index(client, f"/v1/versions/{version_id}/index")
    expected = assign_splits(index, config)
    assert split["counts"] == split_counts(expected, group_by=config.group_by)
    assert split["counts"]["val"]["manifest_rows"] > 0
    assert split["counts"]["train"]["manifest_rows"] > 0

    served = _index(client, f"/v1/splits/{split['id']}/index")
    assert served.equals(expected)
    rows = get_all(client, f"/v1/splits/{split['id']}/index", page_size=5)
    assert [r["split"] for r in rows] == expected["split"].to_list()
    assert table_counts(database_url)["split_assignments"] == index.height

    other = client.post(f"/v1/versions/{version_id}/splits",
                        json={"strategy": "sample", "fraction": 0.3, "seed": 6})
    assert other.status_code == 201
    assert other.json()["id"] != split["id"]


def test_provided_split_holds_out_the_selected_groups(
    client: httpx.Client, version_id: str
) -> None:
    body = {"strategy": "provide", "provided": [{"cell_id": "cell_001"}]}
    response = client.post(f"/v1/versions/{version_id}/splits", json=body)
    assert response.status_code == 201, response.text
    frame = _index(client, f"/v1/splits/{response.json()['id']}/index")
    val = frame.filter(pl.col("split") == "val")
    assert val.height > 0
    assert set(val["cell_id"].to_list()) == {"cell_001"}
    assert "cell_001" not in frame.filter(pl.col("split") == "train")["cell_id"].to_list()


def test_split_errors(client: httpx.Client, version_id: str, database_url: str) -> None:
    before = table_counts(database_url)
    url = f"/v1/versions/{version_id}/splits"
    unknown = assert_error(client.post(url, json={"strategy": "sample",
                                                  "group_by": ["set_id", "no_such"]}),
                           422, "invalid_config")
    assert "no_such" in unknown["message"]
    selector = assert_error(client.post(url, json={"strategy": "provide",
                                                   "provided": [{"cell_id": "cell_999"}]}),
                            422, "invalid_config")
    assert "matches no row" in selector["message"]
    assert_error(client.post(url, json={"strategy": "provide", "provided": [{"colour": "red"}]}),
                 422, "invalid_config")
    assert_error(client.post(url, json={"strategy": "sample", "fraction": 2.0}),
                 422, "invalid_config")
    assert_error(client.post(url, json={"strategy": "provide"}), 422, "invalid_config")
    assert_error(client.post(url, content=b"[1,2", headers={"content-type": "application/json"}),
                 422, "invalid_request")
    assert_error(client.post("/v1/versions/v-unknown/splits", json={"strategy": "sample"}),
                 404, "not_found")
    assert_error(client.get("/v1/splits/s-unknown/index"), 404, "not_found")
    assert table_counts(database_url) == before


def test_split_of_small_rows_dataset(client: httpx.Client, tmp_path: Path) -> None:
    manifest = pl.read_parquet(write_small_dataset(tmp_path))
    response = client.post("/v1/datasets/small/versions", json={
        "root": tmp_path.as_uri(), "rows": manifest.to_dicts(),
    })
    assert response.status_code == 201, response.text
    split = client.post(f"/v1/versions/{response.json()['id']}/splits",
                        json={"strategy": "sample", "fraction": 0.0})
    assert split.status_code == 201
    assert split.json()["counts"]["val"] == {"groups": 0, "manifest_rows": 0, "rows": 0}
