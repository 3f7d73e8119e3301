"""Manifests and index pages cost what their bounds allow, over real HTTP.

* Inline rows naming missing files: the segment checks stop once the listed problems
  are found (the answer counts them as a lower bound), in well under a second and with
  little memory (the catalog runs in this process: its RSS is sampled meanwhile).
* A parquet manifest with more rows than ``WINDPIPE_MAX_MANIFEST_ROWS`` is refused from
  its footer, before its rows are decoded (a CSV file: its records counted first);
  inline rows past the bound are refused before the body is decoded.
* An index page token past the end (any 63-bit integer) is an empty last page.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.memory import peak_rss_growth
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings

_MIB = 1 << 20


@pytest.fixture
def catalog(sqlite_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
                        max_manifest_rows=50_000)
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c


def _missing_rows(n: int) -> list[dict[str, Any]]:
    return [{"set_id": "s0", "cell_id": f"c{i}", "cidx": 0, "protocol": "cycling",
             "segment_path": f"seg/missing-{i}.parquet"} for i in range(n)]


def test_missing_segments_stop_the_checks_early(catalog: httpx.Client, tmp_path: Path) -> None:
    root = write_small_dataset(tmp_path / "data").parent.as_uri()
    body = {"root": root, "rows": _missing_rows(40_000)}
    catalog.get("/v1/datasets")  # the server's first-call costs are paid here

    response, growth = peak_rss_growth(
        lambda: catalog.post("/v1/datasets/big/versions", json=body))
    error = assert_error(response, 422, "invalid_manifest")
    details = error["details"]
    assert len(details["problems"]) == 100
    assert [p["row"] for p in details["problems"]] == list(range(100))
    assert all("does not exist" in p["problem"] for p in details["problems"])
    assert details["problems_complete"] is False
    # the checks stopped (before: every one of 40,000 files looked up): a lower bound
    assert 100 <= details["problem_count"] < 1_000
    assert error["message"].startswith(f"at least {details['problem_count']} problems")
    assert growth < 120 * _MIB, growth / _MIB  # before: ~250 MiB (a traceback per file)


def test_problems_are_listed_in_row_order_and_all_counted(
    catalog: httpx.Client, tmp_path: Path,
) -> None:
    """Cheap problems (paths) are all counted, the first 100 by row listed."""
    root = write_small_dataset(tmp_path / "data").parent.as_uri()
    rows = [{**r, "segment_path": f"/abs/{i}.parquet"} for i, r in enumerate(_missing_rows(500))]
    error = assert_error(catalog.post("/v1/datasets/p/versions",
                                      json={"root": root, "rows": rows}),
                         422, "invalid_manifest")
    assert error["details"]["problem_count"] == 500
    assert error["details"]["problems_complete"] is True
    assert [p["row"] for p in error["details"]["problems"]] == list(range(100))
    assert error["message"].startswith("500 problems in manifest (100 listed)")


def test_a_manifest_file_is_counted_before_it_is_decoded(
    catalog: httpx.Client, tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_small_dataset(data)
    rows = 2_000_000
    pl.DataFrame({"set_id": ["s0"] * rows, "cell_id": ["a-cell-of-some-length"] * rows,
                  "cidx": [0] * rows, "protocol": ["cycling"] * rows,
                  "segment_path": ["seg/c0/0/cycling.parquet"] * rows},
                 ).write_parquet(data / "huge.parquet")
    assert (data / "huge.parquet").stat().st_size < _MIB  # small on disk, big decoded
    catalog.get("/v1/datasets")

    response, growth = peak_rss_growth(lambda: catalog.post(
        "/v1/datasets/huge/versions", json={"root": data.as_uri(), "manifest": "huge.parquet"}))
    error = assert_error(response, 422, "invalid_manifest")
    assert error["details"]["limit"] == "max_manifest_rows"
    assert error["details"]["value"] == rows
    assert growth < 48 * _MIB, growth / _MIB  # before: decoded first (~200 MiB)

    # a CSV file's records are counted (quoted line breaks inside a field included)
    lines = ["set_id,cell_id,cidx,protocol,segment_path,note"]
    lines += [f's0,c{i},0,cycling,seg/c0/0/cycling.parquet,"two\nlines"' for i in range(60_000)]
    (data / "big.csv").write_text("\n".join(lines) + "\n")
    error = assert_error(catalog.post("/v1/datasets/csv/versions", json={
        "root": data.as_uri(), "manifest": "big.csv"}), 422, "invalid_manifest")
    assert (error["details"]["limit"], error["details"]["value"]) == ("max_manifest_rows", 60_000)


def test_inline_rows_are_counted_before_the_body_is_decoded(
    catalog: httpx.Client, tmp_path: Path,
) -> None:
    root = write_small_dataset(tmp_path / "data").parent.as_uri()
    objects = 2_000_000
    body = (b'{"root": ' + json.dumps(root).encode() + b', "rows": ['
            + b"{}," * (objects - 1) + b"{}]}")
    assert len(body) < 8 * _MIB
    catalog.get("/v1/datasets")

    response, growth = peak_rss_growth(lambda: catalog.post(
        "/v1/datasets/many/versions", content=body,
        headers={"content-type": "application/json"}))
    error = assert_error(response, 422, "invalid_manifest")
    assert error["details"]["limit"] == "max_manifest_rows"
    assert error["details"]["value"] == objects
    assert growth < 64 * _MIB, growth / _MIB  # before: a dict per row, twice (~300 MiB)

    # braces inside strings are not rows: a body under the bound passes the count
    rows = [{**r, "label": "{" * 20} for r in _missing_rows(3_000)]
    error = assert_error(catalog.post("/v1/datasets/braces/versions",
                                      json={"root": root, "rows": rows}),
                         422, "invalid_manifest")
    assert "does not exist" in error["details"]["problems"][0]["problem"]


def _token(value: int) -> str:
    raw = json.dumps([value], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_index_page_tokens_past_the_end_are_an_empty_page(
    catalog: httpx.Client, tmp_path: Path,
) -> None:
    root = write_small_dataset(tmp_path / "data").parent.as_uri()
    version = catalog.post("/v1/datasets/d/versions",
                           json={"root": root, "manifest": "manifest.parquet"})
    assert version.status_code == 201, version.text
    split = catalog.post(f"/v1/versions/{version.json()['id']}/splits",
                         json={"strategy": "sample", "fraction": 0.5, "seed": 1})
    assert split.status_code == 201, split.text
    for path in (f"/v1/versions/{version.json()['id']}/index",
                 f"/v1/splits/{split.json()['id']}/index"):
        full = catalog.get(path, params={"page_size": 1000}).json()
        assert full["items"]
        assert full["next_page_token"] is None
        n = len(full["items"])
        for start in (n, n + 1, 10**9, (1 << 63) - 1):  # no walk up to the token
            page = catalog.get(path, params={"page_token": _token(start), "page_size": 1000})
            assert page.status_code == 200, page.text
            assert page.json() == {"items": [], "next_page_token": None}
        last = catalog.get(path, params={"page_token": _token(n - 1)}).json()
        assert last["items"] == full["items"][-1:]
        assert last["next_page_token"] is None
        assert_error(catalog.get(path, params={"page_token": _token(1 << 63)}),
                     422, "invalid_request")
