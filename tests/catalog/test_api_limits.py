"""Limits, 64-bit integers and bounded cost per request, over real HTTP.

Every bound answers 422 naming the limit and its ``WINDPIPE_*`` setting before any
work is done; the largest world size a report or schedule allows is answered with
little memory (the catalog runs in this process: its RSS is sampled meanwhile).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from tests.fixtures.memory import peak_rss_growth
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings

PLAN = {"default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}


@pytest.fixture
def catalog(database_url: str, tmp_path: Path) -> Iterator[tuple[httpx.Client, str]]:
    settings = Settings(database_url=database_url, data_dir=tmp_path / "catalog",
                        log_level="WARNING", max_world_size=4096, max_body_bytes=256 << 10,
                        max_config_body_bytes=16 << 10,
                        max_description_chars=64, max_plan_windows=100)
    write_small_dataset(tmp_path / "data")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        version = c.post("/v1/datasets/d/versions", json={
            "root": (tmp_path / "data").as_uri(), "manifest": "manifest.parquet"})
        assert version.status_code == 201, version.text
        split = c.post(f"/v1/versions/{version.json()['id']}/splits",
                       json={"strategy": "sample", "fraction": 0.0})
        assert split.status_code == 201, split.text
        yield c, split.json()["id"]


def _limit(response: httpx.Response, kind: str, limit: str) -> dict[str, Any]:
    error = assert_error(response, 422, kind)
    assert error["details"]["limit"] == limit, error
    assert error["details"]["setting"] == f"WINDPIPE_{limit.upper()}"
    assert f"WINDPIPE_{limit.upper()}" in error["message"]
    return error


def test_plan_limits_name_their_setting(catalog: tuple[httpx.Client, str],
                                        database_url: str) -> None:
    client, split = catalog
    before = table_counts(database_url)
    url = f"/v1/splits/{split}/plans"

    def window(**w: int) -> dict[str, Any]:
        return {**PLAN, "default_window": {**PLAN["default_window"], **w}}

    _limit(client.post(url, json=window(batch_size=10**6)), "invalid_config", "max_batch_size")
    _limit(client.post(url, json=window(seq_len=2**32 + 8)), "invalid_config", "max_seq_len")
    _limit(client.post(url, json=window(seq_len=2**31)), "invalid_config", "max_seq_len")
    _limit(client.post(url, json=window(batch_size=60_000, seq_len=60_000)),
           "invalid_config", "max_batch_bytes")
    error = assert_error(client.post(url, json=window(batch_size=2**63)), 422, "invalid_config")
    assert "64-bit" in error["message"] or "max_batch_size" in error["message"]
    assert_error(client.post(url, json={**PLAN, "seed": 2**64}), 422, "invalid_config")
    _limit(client.post(url, json=window(batch_size=1, seq_len=1)), "invalid_config",
           "max_plan_windows")
    assert table_counts(database_url) == before  # nothing stored


def test_report_and_schedule_world_size(catalog: tuple[httpx.Client, str]) -> None:
    client, split = catalog
    plan = client.post(f"/v1/splits/{split}/plans", json=PLAN)
    assert plan.status_code == 201, plan.text
    pid = plan.json()["id"]
    for path in (f"/v1/plans/{pid}/report", f"/v1/plans/{pid}/schedule"):
        _limit(client.get(path, params={"world_size": 100_000_000}), "invalid_request",
               "max_world_size")
        assert_error(client.get(path, params={"world_size": 2**63}), 422, "invalid_request")
    assert_error(client.get(f"/v1/plans/{pid}/schedule", params={"epoch": 2**70}), 422,
                 "invalid_request")
    token = base64.urlsafe_b64encode(json.dumps([2**63]).encode()).decode().rstrip("=")
    assert_error(client.get(f"/v1/plans/{pid}/schedule", params={"page_token": token}), 422,
                 "invalid_request")

    report, growth = peak_rss_growth(
        lambda: client.get(f"/v1/plans/{pid}/report", params={"world_size": 4096}))
    assert report.status_code == 200, report.text
    body = report.json()
    assert len(body["batches_per_rank"]) == 4096
    assert sum(body["batches_per_rank_untrimmed"]) == body["batches"]
    page, growth_schedule = peak_rss_growth(lambda: client.get(
        f"/v1/plans/{pid}/schedule", params={"world_size": 4096, "rank": 4095}))
    assert page.status_code == 200, page.text
    assert page.json()["items"] == []  # this small plan has fewer units than ranks
    assert growth < 64 << 20
    assert growth_schedule < 64 << 20


def test_descriptions_and_bodies_are_bounded(catalog: tuple[httpx.Client, str],
                                             tmp_path: Path) -> None:
    client, _ = catalog
    root = (tmp_path / "data").as_uri()
    _limit(client.post("/v1/datasets/e/versions", json={
        "root": root, "manifest": "manifest.parquet", "description": "x" * 65}),
        "invalid_request", "max_description_chars")
    big = {"root": root, "manifest": "manifest.parquet", "description": "y" * (300 << 10)}
    _limit(client.post("/v1/datasets/e/versions", json=big), "invalid_request",
           "max_body_bytes")

    def chunked() -> Iterator[bytes]:
        yield json.dumps(big).encode()

    _limit(client.post("/v1/datasets/e/versions", content=chunked(),
                       headers={"content-type": "application/json"}),
           "invalid_request", "max_body_bytes")
    assert client.get("/v1/datasets/e").status_code == 404
    limits = client.get("/v1/config").json()["limits"]
    assert limits["max_world_size"] == 4096
    assert limits["max_body_bytes"] == 256 << 10
    assert limits["max_config_body_bytes"] == 16 << 10


def test_a_config_body_has_the_smaller_bound(catalog: tuple[httpx.Client, str],
                                             tmp_path: Path) -> None:
    """Bodies FastAPI decodes on the event loop (plans, splits, tokens) are bounded by
    max_config_body_bytes; a registration's, read off the loop, by max_body_bytes."""
    client, split = catalog
    padded = {**PLAN, "description": "p" * (20 << 10)}  # above 16 KiB, below 256 KiB
    _limit(client.post(f"/v1/splits/{split}/plans", json=padded), "invalid_request",
           "max_config_body_bytes")
    _limit(client.post(f"/v1/splits/{split}/plans", content=iter([json.dumps(padded).encode()]),
                       headers={"content-type": "application/json"}),
           "invalid_request", "max_config_body_bytes")
    # the same size registers as far as its description's own bound
    _limit(client.post("/v1/datasets/e/versions", json={
        "root": (tmp_path / "data").as_uri(), "manifest": "manifest.parquet",
        "description": "y" * (20 << 10)}), "invalid_request", "max_description_chars")
    assert client.post(f"/v1/splits/{split}/plans", json=PLAN).status_code == 201


def test_a_422_lists_the_first_hundred_errors(catalog: tuple[httpx.Client, str],
                                              tmp_path: Path) -> None:
    client, _ = catalog
    error = assert_error(client.post("/v1/datasets/e/versions", json={
        "root": (tmp_path / "data").as_uri(), "rows": [1] * 5000}), 422, "invalid_request")
    assert len(error["details"]["errors"]) == 100
    assert error["details"]["errors_total"] == 5000
    assert error["details"]["errors"][0]["loc"] == ["body", "rows", 0]


def test_nul_characters_are_a_422_not_a_500(catalog: tuple[httpx.Client, str],
                                            tmp_path: Path) -> None:
    client, _ = catalog
    write_small_dataset(tmp_path / "other", n_cells=1)
    response = client.post("/v1/datasets/n/versions", json={
        "root": (tmp_path / "other").as_uri(), "manifest": "manifest.parquet",
        "description": "a\x00b"})
    # PostgreSQL text cannot hold NUL: refused on every database, naming the field
    assert "body.description" in assert_error(response, 422, "invalid_request")["message"]
    assert client.get("/v1/datasets/n%00x").status_code in (404, 422)


def test_manifest_bytes_and_rows_are_bounded(sqlite_url: str, tmp_path: Path) -> None:
    manifest = write_small_dataset(tmp_path / "data")
    rows = [{"set_id": "s0", "cell_id": f"c{i}", "cidx": 0, "protocol": "cycling",
             "segment_path": "seg/c0/0/cycling.parquet"} for i in range(5)]
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="WARNING",
                        max_manifest_bytes=1024, max_manifest_rows=4)
    assert manifest.stat().st_size > 1024
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        root = (tmp_path / "data").as_uri()
        error = _limit(c.post("/v1/datasets/d/versions",
                              json={"root": root, "manifest": "manifest.parquet"}),
                       "invalid_manifest", "max_manifest_bytes")
        assert error["details"]["value"] == manifest.stat().st_size
        _limit(c.post("/v1/datasets/d/versions", json={"root": root, "rows": rows}),
               "invalid_manifest", "max_manifest_rows")
        assert c.get("/v1/datasets/d").status_code == 404
