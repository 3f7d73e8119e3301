"""``POST`` / ``GET /v1/splits/{id}/stats`` on a real catalog (SQLite and PostgreSQL):
computed once and stored, refused typed (unknown and non-numeric columns, the memory
bound before a segment is read, a retired split), integer columns counted exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
from pydantic import SecretStr

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from tests.fixtures.data import write_manifest, write_parquet_segment
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings

SPLIT = {"strategy": "sample", "fraction": 0.5, "seed": 2}


def _split(client: httpx.Client, root: Path, name: str = "d") -> str:
    body = {"root": root.as_uri(), "manifest": "manifest.parquet"}
    version = client.post(f"/v1/datasets/{name}/versions", json=body)
    assert version.status_code == 201, version.text
    split = client.post(f"/v1/versions/{version.json()['id']}/splits", json=SPLIT)
    assert split.status_code == 201, split.text
    return str(split.json()["id"])


def test_computed_once_stored_and_read_back(catalog_server: str, tmp_path: Path,
                                            database_url: str) -> None:
    write_small_dataset(tmp_path / "d")
    with httpx.Client(base_url=catalog_server, timeout=60) as client:
        split_id = _split(client, tmp_path / "d")
        path = f"/v1/splits/{split_id}/stats"
        assert_error(client.get(path), 404, "not_found")
        first = client.post(path, json={})
        assert first.status_code == 201, first.text
        body = first.json()
        assert (body["side"], body["columns"], body["split_id"]) == ("train", None, split_id)
        # the string column is no statistic; both protocols have both numeric columns
        assert [(e["protocol"], e["column"]) for e in body["stats"]] == [
            ("cycling", "current_a"), ("cycling", "voltage_v"),
            ("hppc", "current_a"), ("hppc", "voltage_v")]
        again = client.post(path, json={"side": "train"})
        assert again.status_code == 200
        assert again.json() == body
        assert client.get(path).json() == body
        one = client.post(path, json={"columns": ["voltage_v"]})
        assert one.status_code == 201
        assert client.get(path, params={"columns": "voltage_v"}).json() == one.json()
        assert [e["column"] for e in one.json()["stats"]] == ["voltage_v", "voltage_v"]
        assert client.post(f"/v1/splits/{split_id}/stats", json={"side": "val"}).status_code \
            == 201
        assert table_counts(database_url)["split_stats"] == 3

        assert_error(client.post(path, json={"columns": ["nope"]}), 422, "invalid_request")
        refused = assert_error(client.post(path, json={"columns": ["label"]}), 422,
                               "invalid_request")
        assert refused["details"]["non_numeric"] == ["label"]
        assert client.post(path, json={"side": "test"}).status_code == 422
        assert client.post(path, json={"columns": []}).status_code == 422
        assert_error(client.get(path, params={"columns": ""}), 422, "invalid_request")
        assert_error(client.post("/v1/splits/s-nope/stats", json={}), 404, "not_found")

        assert client.delete(f"/v1/splits/{split_id}").status_code == 200
        assert_error(client.post(path, json={}), 409, "conflict")


def test_the_memory_bound_refuses_before_a_segment_is_read(tmp_path: Path) -> None:
    root = tmp_path / "d"
    write_small_dataset(root)
    settings = Settings(data_dir=tmp_path / "state", log_level="WARNING", max_stats_bytes=1024,
                        admin_token=SecretStr("t"))
    with run_catalog_server(settings) as url, httpx.Client(
            base_url=url, timeout=60, headers={"Authorization": "Bearer t"}) as client:
        split_id = _split(client, root)
        shutil.rmtree(root / "seg")  # reading anything now would fail
        error = assert_error(client.post(f"/v1/splits/{split_id}/stats", json={}), 422,
                             "invalid_request")
        assert error["details"]["limit"] == "max_stats_bytes"
        assert error["details"]["setting"] == "WINDPIPE_MAX_STATS_BYTES"
        assert error["details"]["value"] > 1024
        # one float32 column fits (4 bytes a row): it is read, and the files are gone
        assert error["details"]["value"] // 2 <= 1024
        assert_error(client.post(f"/v1/splits/{split_id}/stats",
                                 json={"columns": ["current_a"]}), 422, "segment_error")


def test_integer_columns_are_counted_exactly(catalog_server: str, tmp_path: Path) -> None:
    root = tmp_path / "ints"
    big = np.array([2**52 + 1, -(2**52) - 3, 5, 7], dtype=np.int64)  # float64 holds them
    write_parquet_segment(root, "a.parquet", {
        "count": pa.array([1, None, 3, 4], type=pa.int64()),
        "big": big, "flag": np.array([True, False, True, True]),
    })
    write_manifest(root, [{"set_id": "s", "cell_id": "c", "cidx": 0, "protocol": "cycling",
                           "segment_path": "a.parquet"}])
    with httpx.Client(base_url=catalog_server, timeout=60) as client:
        version = client.post("/v1/datasets/ints/versions",
                              json={"root": root.as_uri(), "manifest": "manifest.parquet"})
        assert version.status_code == 201, version.text
        profile = {c["column"]: c for c in version.json()["profile"]["columns"]}
        assert profile["count"]["nulls"] == 1  # from the footer, unread
        assert version.json()["profile"]["null_counts_from_footer"] == 3
        split = client.post(f"/v1/versions/{version.json()['id']}/splits",
                            json={"strategy": "sample", "fraction": 0.0})
        stats = client.post(f"/v1/splits/{split.json()['id']}/stats", json={}).json()
        by = {e["column"]: e for e in stats["stats"]}
        assert (by["count"]["count"], by["count"]["nulls"], by["count"]["mean"]) == (
            3, 1, 8 / 3)
        assert (by["big"]["min"], by["big"]["max"]) == (-(2**52) - 3, 2**52 + 1)
        assert by["big"]["p50"] == 6.0
        assert by["flag"]["mean"] == 0.75
